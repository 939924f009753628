package inventory

import "encoding/json"

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
