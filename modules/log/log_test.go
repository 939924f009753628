package log_test

import (
	"testing"

	"github.com/gpush/gpush/modules/log"
	"github.com/gpush/gpush/modules/modulestest"
)

func TestLua(t *testing.T) {
	modulestest.RunLuaFiles(t, "testdata/*_test.lua", func(t *testing.T) *modulestest.Host {
		return modulestest.NewHost("gpu04", modulestest.NewGPUHost("gpu04", 1))
	}, log.Module)
}
