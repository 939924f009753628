package remote

import (
	"context"
	"reflect"
	"strings"
	"testing"
)

func argvOf(t *testing.T, tr Transport, argv []string) []string {
	t.Helper()
	ct, ok := tr.(*commandTransport)
	if !ok {
		t.Fatalf("%T is not a command transport", tr)
	}
	return ct.Argv(argv)
}

// Every connection name of the inventory has a transport.
func TestRegistryHasTheConnections(t *testing.T) {
	got := Connections()
	for _, want := range []string{"docker", "gpush_command", "kubectl", "local", "podman", "ssh"} {
		found := false
		for _, g := range got {
			found = found || g == want
		}
		if !found {
			t.Errorf("Connections() = %v, missing %q", got, want)
		}
	}
	_, err := Dial(context.Background(), Host{Name: "h", Connection: "winrm"}, Options{})
	if err == nil || !strings.Contains(err.Error(), `unsupported connection "winrm"`) {
		t.Errorf("Dial(winrm) = %v", err)
	}
}

// podman and docker: exec -i into the named container; argv elements are
// passed as they are, never through a shell (no "--": both stop reading
// options at the container's name, which may not start with -).
func TestContainerTransportArgv(t *testing.T) {
	argv := []string{"gpush-helper", "serve", "tok; rm -rf /", "$(id)"}
	tr, err := newContainerTransport("podman", "ansible_podman_executable", Host{Name: "gpu01", Address: "gpu-agent"})
	if err != nil {
		t.Fatal(err)
	}
	want := append([]string{"podman", "exec", "-i", "gpu-agent"}, argv...)
	if got := argvOf(t, tr, argv); !reflect.DeepEqual(got, want) {
		t.Errorf("podman argv %q, want %q", got, want)
	}
	if got := tr.(*commandTransport).put("/tmp/x", "/root/.cache/gpush/.h.gpush-tmp-1"); !reflect.DeepEqual(got,
		[]string{"podman", "cp", "/tmp/x", "gpu-agent:/root/.cache/gpush/.h.gpush-tmp-1"}) {
		t.Errorf("podman cp argv %q", got)
	}
	tr, err = newContainerTransport("docker", "ansible_docker_executable", Host{Name: "gpu01", Address: "agent", User: "svc",
		Vars: map[string]any{"ansible_docker_executable": "/opt/docker"}})
	if err != nil {
		t.Fatal(err)
	}
	want = append([]string{"/opt/docker", "exec", "-i", "--user", "svc", "agent"}, argv...)
	if got := argvOf(t, tr, argv); !reflect.DeepEqual(got, want) {
		t.Errorf("docker argv %q, want %q", got, want)
	}
	if _, err := newContainerTransport("podman", "ansible_podman_executable", Host{Name: "x", Address: "--privileged"}); err == nil {
		t.Error("a container name starting with - was taken")
	}
}

// kubectl: kubectl exec -i -n NS POD -- argv; it is not run against a
// cluster here (none can be reached), so this stops at the argv.
func TestKubectlTransportArgv(t *testing.T) {
	argv := []string{"sh", "-c", "echo $HOME", "sh"}
	tr, err := newKubectlTransport(Host{Name: "gpu01", Address: "gpu01.example", Vars: map[string]any{
		"ansible_kubectl_namespace": "gpu-system", "ansible_kubectl_pod": "gpush-agent-x7k2p",
		"ansible_kubectl_container": "agent", "ansible_kubectl_context": "prod",
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := append([]string{"kubectl", "--context", "prod", "-n", "gpu-system", "exec", "-i", "-c", "agent", "gpush-agent-x7k2p", "--"}, argv...)
	if got := argvOf(t, tr, argv); !reflect.DeepEqual(got, want) {
		t.Errorf("kubectl argv %q, want %q", got, want)
	}
	if got := tr.(*commandTransport).put("/tmp/h", "/root/h"); !reflect.DeepEqual(got,
		[]string{"kubectl", "--context", "prod", "-n", "gpu-system", "cp", "-c", "agent", "/tmp/h", "gpush-agent-x7k2p:/root/h"}) {
		t.Errorf("kubectl cp argv %q", got)
	}
	// No pod var: ansible_host names the pod.
	tr, err = newKubectlTransport(Host{Name: "gpu01", Address: "pod-a"})
	if err != nil {
		t.Fatal(err)
	}
	if got := argvOf(t, tr, []string{"id"}); !reflect.DeepEqual(got, []string{"kubectl", "exec", "-i", "pod-a", "--", "id"}) {
		t.Errorf("kubectl argv %q", got)
	}
	if _, err := newKubectlTransport(Host{Name: "x", Address: "p", Vars: map[string]any{"ansible_kubectl_namespace": 3}}); err == nil {
		t.Error("a non-string namespace was taken")
	}
}

// gpush_command: placeholders are substituted per element, {argv} splices
// the arguments as elements, {argv_sh} quotes them for a far-end shell,
// and a value holding a placeholder is not substituted again.
func TestCommandTransportArgv(t *testing.T) {
	argv := []string{"gpush-helper", "serve", "it's {host}", "$(reboot)"}
	tg := Host{Name: "gpu01", Address: "node{name}01", User: "ops", Vars: map[string]any{
		VarCommand: []any{"srun", "--jobid=42", "-w", "{host}", "--overlap", "{argv}"},
	}}
	tr, err := newCommandTransport(tg)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]string{"srun", "--jobid=42", "-w", "node{name}01", "--overlap"}, argv...)
	if got := argvOf(t, tr, argv); !reflect.DeepEqual(got, want) {
		t.Errorf("srun argv %q, want %q", got, want)
	}
	tg.Vars[VarCommand] = []any{"ssh", "-l", "{user}", "{host}", "--", "exec {argv_sh}", "{{literal}}"}
	tr, err = newCommandTransport(tg)
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"ssh", "-l", "ops", "node{name}01", "--", "exec " + ShellJoin(argv), "{literal}"}
	if got := argvOf(t, tr, argv); !reflect.DeepEqual(got, want) {
		t.Errorf("ssh argv %q, want %q", got, want)
	}
	if got := argvOf(t, tr, argv)[5]; got != `exec gpush-helper serve 'it'\''s {host}' '$(reboot)'` {
		t.Errorf("argv_sh %q", got)
	}
	for _, bad := range []any{
		nil, "srun -w {host} {argv}", []any{"srun", "{host}"}, []any{"srun", "{argv}", "{argv}"},
		[]any{"srun", "--cmd={argv}"}, []any{"{argv}"}, []any{"srun", 3, "{argv}"}, []any{},
	} {
		if _, err := newCommandTransport(Host{Name: "h", Vars: map[string]any{VarCommand: bad}}); err == nil {
			t.Errorf("template %#v was taken", bad)
		}
	}
}

// A command transport's commands run as argv, and its Put goes through
// stdin: gpush_command with env(1) as the "remote" command runs here.
func TestCommandConnRunPutGet(t *testing.T) {
	dir := t.TempDir()
	h := Host{Name: "here", Connection: "gpush_command",
		Vars: map[string]any{VarCommand: []any{"env", "GPUSH_T={host}", "{argv}"}}}
	c, err := Dial(context.Background(), h, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	res, err := c.Run(ctx, []string{"sh", "-c", `printf '%s|%s' "$GPUSH_T" "$1"; echo oops >&2; exit 3`, "sh", "a b;c"}, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "here|a b;c" || string(res.Stderr) != "oops\n" || res.ExitCode != 3 {
		t.Errorf("run: %q %q %d", res.Stdout, res.Stderr, res.ExitCode)
	}
	res, err = c.Run(ctx, []string{"cat"}, RunOptions{Stdin: strings.NewReader("fed")})
	if err != nil || string(res.Stdout) != "fed" {
		t.Errorf("stdin: %v %+v", err, res)
	}
	p := dir + "/f"
	if err := c.Put(ctx, p, strings.NewReader("content"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := c.Get(ctx, p)
	if err != nil || string(b) != "content" {
		t.Errorf("get: %q %v", b, err)
	}
}
