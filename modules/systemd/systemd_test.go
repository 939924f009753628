package systemd_test

import (
	"testing"

	"github.com/gpush/gpush/modules/gpu"
	"github.com/gpush/gpush/modules/modulestest"
	"github.com/gpush/gpush/modules/systemd"
)

func TestLua(t *testing.T) {
	modulestest.RunLuaFiles(t, "testdata/*_test.lua", func(t *testing.T) *modulestest.Host {
		return modulestest.NewHost("gpu02", modulestest.NewGPUHost("gpu02", 1))
	}, systemd.Module, gpu.Module)
}

// TestNoSystemd: a host without systemd is a result, not an error.
func TestNoSystemd(t *testing.T) {
	model := modulestest.NewGPUHost("ct1", 1)
	model.NoSystemd = true
	h := modulestest.NewHost("ct1", model)
	L := modulestest.NewState(t, h, systemd.Module)
	defer L.Close()
	if err := L.DoString(`r = systemd.stop("sglang.service")`); err != nil {
		t.Fatalf("stop on a host without systemd raised: %v", err)
	}
	r := L.GetGlobal("r")
	if got := L.GetField(r, "systemd").String(); got != "false" {
		t.Errorf("systemd = %s, want false", got)
	}
	if got := L.GetField(r, "ok").String(); got != "false" {
		t.Errorf("ok = %s, want false", got)
	}
	if got := L.GetField(r, "reason").String(); got == "nil" || got == "" {
		t.Errorf("reason is empty, want why")
	}
}
