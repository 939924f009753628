package inventory

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"gopkg.in/yaml.v3"
)

// ErrYAMLExpansion is the error of every YAML input (inventory file,
// group_vars/host_vars file, -e @file, a script var) whose aliases would
// expand it past MaxYAMLExpansion nodes: a "billion laughs" document is a
// few hundred bytes that expands to billions of values once its aliases
// are copied out (as listings, merges and JSON output do). Test with
// errors.Is.
var ErrYAMLExpansion = errors.New("YAML aliases expand past the budget")

// MaxYAMLExpansion is how many nodes the aliases of one YAML document may
// add to those written in it. The written ones are bounded by the input
// size cap; real inventories reuse an anchor a few times, far below this.
const MaxYAMLExpansion = 1_000_000

// maxYAMLAliases bounds how many aliases one document may hold: each costs
// a lookup even when its target is tiny.
const maxYAMLAliases = 100_000

// yamlExpansionError names the file and the line of the alias that went
// past the budget.
type yamlExpansionError struct {
	at     Pos
	reason string
}

func (e *yamlExpansionError) Error() string {
	return fmt.Sprintf("%s: %s (%v: at most %d nodes added by aliases, %d aliases)", e.at, e.reason, ErrYAMLExpansion, MaxYAMLExpansion, maxYAMLAliases)
}

func (e *yamlExpansionError) Unwrap() error { return ErrYAMLExpansion }

// checkYAMLExpansion walks a parsed document once, counting what its
// aliases would expand to (each anchored node's size computed once), and
// refuses it as soon as the budget is spent, so a bomb costs its parse
// and nothing more. An alias inside its own anchor is refused too.
func checkYAMLExpansion(file string, root *yaml.Node) error {
	c := yamlCounter{file: file, size: map[*yaml.Node]int{}, busy: map[*yaml.Node]bool{}}
	_, err := c.count(root)
	return err
}

type yamlCounter struct {
	file    string
	size    map[*yaml.Node]int // expanded size of anchored nodes
	busy    map[*yaml.Node]bool
	added   int // nodes reached through aliases
	aliases int
}

// count returns n's expanded size, adding what each alias expands to to
// the budget spent.
func (c *yamlCounter) count(n *yaml.Node) (int, error) {
	if n == nil {
		return 0, nil
	}
	if n.Kind == yaml.AliasNode {
		c.aliases++
		if c.aliases > maxYAMLAliases {
			return 0, &yamlExpansionError{Pos{c.file, n.Line}, fmt.Sprintf("more than %d aliases", maxYAMLAliases)}
		}
		if n.Alias == nil {
			return 1, nil // unknown alias: the parser or the decoder names it
		}
		if c.busy[n.Alias] {
			return 0, &yamlExpansionError{Pos{c.file, n.Line}, fmt.Sprintf("alias *%s is inside its own anchor", n.Value)}
		}
		s, ok := c.size[n.Alias]
		if !ok {
			var err error
			if s, err = c.count(n.Alias); err != nil {
				return 0, err
			}
		}
		c.added += s
		if c.added > MaxYAMLExpansion {
			return 0, &yamlExpansionError{Pos{c.file, n.Line}, fmt.Sprintf("alias *%s expands the document past %d added nodes", n.Value, MaxYAMLExpansion)}
		}
		return s, nil
	}
	if s, ok := c.size[n]; ok {
		return s, nil
	}
	c.busy[n] = true
	total := 1
	for _, ch := range n.Content {
		s, err := c.count(ch)
		if err != nil {
			return 0, err
		}
		total += s
	}
	delete(c.busy, n)
	if n.Anchor != "" {
		c.size[n] = total
	}
	return total, nil
}

// DecodeYAML parses the first YAML document of data (named file in
// errors) into out, as yaml.Unmarshal does, after refusing an alias bomb
// (ErrYAMLExpansion) and vault-encrypted data (ErrVaultEncrypted). It is
// for YAML read outside inventories: -e @file and -e values, script vars.
func DecodeYAML(file string, data []byte, out any) error {
	if isVaultFile(data) {
		return vaultFileError(file)
	}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	if err := checkYAMLExpansion(file, &doc); err != nil {
		return err
	}
	return doc.Decode(out)
}
