package ssh_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/gpush/gpush/modules/modulestest"
	"github.com/gpush/gpush/modules/ssh"
	"github.com/gpush/gpush/remote"
)

func TestLua(t *testing.T) {
	modulestest.RunLuaFiles(t, "testdata/*_test.lua", func(t *testing.T) *modulestest.Host {
		h := modulestest.NewHost("gpu03", modulestest.NewGPUHost("gpu03", 1))
		// The fake "host" answers echo and false like a shell would.
		h.FakeConn.RunFunc = func(argv []string, opts remote.RunOptions, stdin string) (*remote.Result, error) {
			switch {
			case argv[0] == "echo":
				return &remote.Result{Stdout: []byte(strings.Join(argv[1:], " ") + "\n")}, nil
			case argv[0] == "cap":
				// Says what cap the call asked remote for.
				return &remote.Result{Stdout: []byte(strconv.FormatInt(opts.MaxOutput, 10))}, nil
			case argv[0] == "cat":
				return &remote.Result{Stdout: []byte(stdin)}, nil
			case argv[0] == "sh" && argv[2] == "exit 3":
				return &remote.Result{ExitCode: 3, Stderr: []byte("bye\n")}, nil
			}
			return &remote.Result{}, nil
		}
		return h
	}, ssh.Module)
}
