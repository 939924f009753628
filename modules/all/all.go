// Package all registers every module gpush ships: importing it is what
// puts them in modules' registry, which the runtime loads and `gpush doc`
// lists. A new module is added here and nowhere else.
package all

import (
	_ "github.com/gpush/gpush/modules/gpu"
	_ "github.com/gpush/gpush/modules/log"
	_ "github.com/gpush/gpush/modules/ssh"
	_ "github.com/gpush/gpush/modules/systemd"
)
