package luaconv

import (
	"fmt"
	"strings"

	glua "github.com/yuin/gopher-lua"
)

// Show writes a value for people: strings as they are, numbers without a
// needless fraction, tables as compact JSON (tostring when that fails).
func Show(lv glua.LValue) string {
	switch x := lv.(type) {
	case glua.LString:
		return string(x)
	case glua.LNumber:
		return FormatNumber(float64(x))
	case *glua.LTable:
		if b, err := EncodeJSON(x); err == nil {
			return string(b)
		}
	}
	return lv.String()
}

// Format builds a message from arguments n..top like string.format, with
// tables shown as JSON so that `log.info("gpus: %s", gpu.mem())` reads well.
// With a single argument it is shown as is, so a stray % needs no escaping.
func Format(L *glua.LState, n int) string {
	top := L.GetTop()
	if top < n {
		return ""
	}
	if top == n {
		return Show(L.Get(n))
	}
	format := Show(L.Get(n))
	args := make([]any, 0, top-n)
	for i := n + 1; i <= top; i++ {
		switch v := L.Get(i).(type) {
		case *glua.LTable, *glua.LNilType, glua.LBool, *glua.LFunction, *glua.LUserData:
			args = append(args, Show(v))
		default:
			args = append(args, v) // numbers and strings keep %d, %5.1f, %q working
		}
	}
	verbs := strings.Count(format, "%") - 2*strings.Count(format, "%%")
	if verbs < len(args) {
		args = args[:max(verbs, 0)]
	}
	return fmt.Sprintf(format, args...)
}
