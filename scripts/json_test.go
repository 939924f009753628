package scripts

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/modules/modulestest"
	"github.com/gpush/gpush/report"
	"github.com/gpush/gpush/report/jsoncheck"
)

// The library's scripts, run on a model host and printed by --json, fit
// docs/json-schema.json: their rows in .rows, holders and managers as
// objects; and the fleet table shows those objects' labels, its * mark
// explained under it.
func TestScriptsJSONMatchSchema(t *testing.T) {
	schema, err := jsoncheck.Load("../docs/json-schema.json")
	if err != nil {
		t.Fatal(err)
	}
	m := modulestest.NewGPUHost("gpu01", 2)
	sup := m.AddProc(modulestest.FakeProc{Comm: "torchrun"})
	m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{Unit: "vllm.service", Cmdline: []string{"/usr/bin/python3",
		"/opt/jobs/team/a/very/long/path/to/serve.py", "--model", "/models/qwen"}, PPID: sup.PID}, MemByGPU: map[int]int64{0: 10240}})
	m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{GPUs: []int{0, 1}, Comm: "nvitop", User: "root"}, Monitor: true})
	var rs []report.Result
	for _, c := range []struct {
		script string
		check  bool
	}{{"gpu_status.lua", false}, {"gpu_holders.lua", false}, {"free_gpus.lua", true}} {
		r := runScript(t, m, c.script, c.check, nil)
		if r.err != nil {
			t.Fatalf("%s: %v", c.script, r.err)
		}
		rs = append(rs, report.Result{Host: strings.TrimSuffix(c.script, ".lua"), Status: report.StatusOK, Value: r.value})
	}
	var out bytes.Buffer
	p := report.New(report.Options{Out: &out, JSON: true})
	p.Finish(rs)
	for _, line := range strings.Split(strings.TrimRight(out.String(), "\n"), "\n") {
		if err := schema.ValidateJSON([]byte(line)); err != nil {
			t.Errorf("%v\n%s", err, line)
		}
		if strings.Contains(line, `"type":"host"`) && (!strings.Contains(line, `"value":null`) || strings.Contains(line, `"rows":[]`)) {
			t.Errorf("rows not in .rows:\n%s", line)
		}
	}
	for _, want := range []string{`"holders":[{"comm":"python3","label":"`, `"manager":{`, `"stop":"kill ` + strconv.Itoa(sup.PID) + `"`,
		"/opt/jobs/team/a/very/long/path/to/serve.py --model /models/qwen"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--json lacks %s:\n%s", want, out.String())
		}
	}

	// The table: labels, not JSON; the mark explained; fits 120 columns
	// unless --wide.
	out.Reset()
	p = report.New(report.Options{Out: &out, TableWidth: -1})
	p.Finish(rs[:1])
	s := out.String()
	for _, want := range []string{"alice python3* 10.0 GiB (vllm.service), ", "HOLDERS *: owns GPU memory",
		"(python3 /opt/jobs/team/a/very/long/path/to/serve.py --model /models/qwen)"} {
		if !strings.Contains(s, want) {
			t.Errorf("--wide table lacks %q:\n%s", want, s)
		}
	}
	out.Reset()
	p = report.New(report.Options{Out: &out})
	p.Finish(rs[:1])
	for _, l := range strings.Split(out.String(), "\n") {
		if n := len([]rune(l)); n > 120 {
			t.Errorf("a %d-column line:\n%s", n, out.String())
		}
	}
	out.Reset()
	p = report.New(report.Options{Out: &out, TableWidth: -1})
	p.Finish(rs[1:2])
	if s := out.String(); !strings.Contains(s, "pid "+strconv.Itoa(sup.PID)+" (torchrun launch.py)") || strings.Contains(s, `{"`) {
		t.Errorf("gpu_holders' manager not shown by its label:\n%s", s)
	}
}
