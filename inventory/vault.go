package inventory

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// VaultValue is a value tagged !vault in a YAML inventory or vars file. It
// is never decrypted: gpush has no vault password, and the ciphertext must
// never be taken for an address or a user. At is where it was written.
type VaultValue struct {
	Ciphertext string
	At         Pos
}

// MarshalJSON writes it as ansible-inventory does.
func (v VaultValue) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]string{"__ansible_vault": v.Ciphertext})
}

// String never shows the ciphertext as if it were the value.
func (v VaultValue) String() string { return "<vault-encrypted value at " + v.At.String() + ">" }

// ErrVaultEncrypted is the error of a whole file encrypted with
// ansible-vault (an inventory, a group_vars/host_vars file, an -e @file):
// gpush has no vault password and never decrypts, and read as text its
// ciphertext would become hosts or vars. Test with errors.Is.
var ErrVaultEncrypted = errors.New("the file is vault-encrypted; gpush never decrypts vault data (keep what gpush needs outside the vault, or decrypt it with ansible-vault decrypt)")

// isVaultFile is Ansible's is_encrypted test (parsing/vault): the data
// starts with the $ANSIBLE_VAULT header, leading whitespace allowed as
// Ansible's loader strips it.
func isVaultFile(data []byte) bool {
	return bytes.HasPrefix(bytes.TrimLeft(data, " \t\r\n"), []byte("$ANSIBLE_VAULT;"))
}

func vaultFileError(file string) error {
	return fmt.Errorf("%s: %w", file, ErrVaultEncrypted)
}
