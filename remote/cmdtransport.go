package remote

import (
	"context"
	"fmt"
	"os"
	"strings"
)

// commandTransport runs every argv through a local program that carries
// the pipes to the target (podman exec -i, kubectl exec -i, a site's
// command): wrap turns the target's argv into the local one. put copies a
// file (podman cp, kubectl cp); nil: through stdin (sh -c 'cat > "$1"').
type commandTransport struct {
	wrap func(argv []string) []string
	put  func(local, remotePath string) []string
}

// Argv is the local argument vector that runs argv on the target.
func (t *commandTransport) Argv(argv []string) []string { return t.wrap(argv) }

func (t *commandTransport) Start(ctx context.Context, argv []string) (Stream, error) {
	return startExec(ctx, t.wrap(argv))
}

func (t *commandTransport) Put(ctx context.Context, local, remotePath string) error {
	if t.put == nil {
		return putThroughStdin(ctx, t, local, remotePath)
	}
	argv := t.put(local, remotePath)
	st, err := startExec(ctx, argv)
	if err != nil {
		return err
	}
	return waitStream(ctx, st, argv[0], nil)
}

// putThroughStdin copies local to remotePath as the stdin of
// sh -c 'cat > "$1"' on the target.
func putThroughStdin(ctx context.Context, t Transport, local, remotePath string) error {
	f, err := os.Open(local)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := t.Start(ctx, []string{"sh", "-c", `cat > "$1"`, "sh", remotePath})
	if err != nil {
		return err
	}
	return waitStream(ctx, st, "cat", f)
}

// waitStream feeds st stdin (nil: none), waits for its end and fails
// unless it exited 0.
func waitStream(ctx context.Context, st Stream, what string, stdin *os.File) error {
	defer st.Close()
	werr := make(chan error, 1)
	go func() {
		var err error
		if stdin != nil {
			_, err = copyCtx(ctx, st, stdin)
		}
		st.CloseWrite()
		werr <- err
	}()
	errOut := &tailBuffer{max: 2000}
	outDone := make(chan struct{})
	go func() { copySmall(errOut, st.Stderr(), 512); close(outDone) }()
	go func() { copySmall(&tailBuffer{max: 200}, st, 512) }()
	select {
	case <-outDone:
	case <-ctx.Done():
		return ctx.Err()
	}
	status, signal, _ := st.Exit(serveExitWait)
	if err := <-werr; err != nil {
		return fmt.Errorf("%s: write: %w", what, err)
	}
	if status != 0 {
		if signal != "" {
			return fmt.Errorf("%s: killed by signal %s: %s", what, signal, strings.TrimSpace(string(errOut.Bytes())))
		}
		return fmt.Errorf("%s: exit status %d: %s", what, status, strings.TrimSpace(string(errOut.Bytes())))
	}
	return nil
}

// varString is the string var key of t ("" when unset); other types are an error.
func varString(t Host, key string) (string, error) {
	v, ok := t.Vars[key]
	if !ok || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s: %s must be a string, got %v", t.Name, key, v)
	}
	return strings.TrimSpace(s), nil
}

// optionSafe refuses a name that the program would read as an option.
func optionSafe(t Host, what, s string) error {
	if s == "" {
		return fmt.Errorf("%s: empty %s", t.Name, what)
	}
	if strings.HasPrefix(s, "-") {
		return fmt.Errorf("%s: %s %q starts with '-'", t.Name, what, s)
	}
	return nil
}

// newContainerTransport is podman's or docker's: exec into the container
// named by ansible_host (else the inventory name) on this machine, as
// Ansible's containers.podman.podman and community.docker.docker do. A
// privileged container sharing the host's PID namespace (--pid=host, the
// DaemonSet pattern) sees the host's GPU holders. The helper is copied in
// with `podman cp`, to a temp name then renamed inside.
func newContainerTransport(engine, exeVar string, t Host) (Transport, error) {
	exe, err := varString(t, exeVar)
	if err != nil {
		return nil, err
	}
	if exe == "" {
		exe = engine
	}
	name := t.Address
	if err := optionSafe(t, "container name", name); err != nil {
		return nil, err
	}
	var user []string
	if t.User != "" {
		user = []string{"--user", t.User}
	}
	return &commandTransport{
		wrap: func(argv []string) []string {
			out := append([]string{exe, "exec", "-i"}, user...)
			// No "--" after the name: podman and docker stop reading
			// options at it, and would run "--" as the command.
			return append(append(out, name), argv...)
		},
		put: func(local, remotePath string) []string {
			return []string{exe, "cp", local, name + ":" + remotePath}
		},
	}, nil
}

// newKubectlTransport is kubernetes.core.kubectl's: kubectl exec -i into
// the pod named by ansible_kubectl_pod (else ansible_host, else the
// inventory name), in ansible_kubectl_namespace, container
// ansible_kubectl_container, with ansible_kubectl_kubeconfig and
// ansible_kubectl_context; files go in with kubectl cp (which needs tar in
// the container).
func newKubectlTransport(t Host) (Transport, error) {
	var err error
	get := func(k string) string {
		v, e := varString(t, k)
		if e != nil && err == nil {
			err = e
		}
		return v
	}
	exe, pod, ns, ctr := get("ansible_kubectl_executable"), get("ansible_kubectl_pod"), get("ansible_kubectl_namespace"), get("ansible_kubectl_container")
	kubeconfig, kctx := get("ansible_kubectl_kubeconfig"), get("ansible_kubectl_context")
	if err != nil {
		return nil, err
	}
	if exe == "" {
		exe = "kubectl"
	}
	if pod == "" {
		pod = t.Address
	}
	if err := optionSafe(t, "pod name", pod); err != nil {
		return nil, err
	}
	var global []string
	if kubeconfig != "" {
		global = append(global, "--kubeconfig", kubeconfig)
	}
	if kctx != "" {
		global = append(global, "--context", kctx)
	}
	if ns != "" {
		global = append(global, "-n", ns)
	}
	var c []string
	if ctr != "" {
		c = []string{"-c", ctr}
	}
	return &commandTransport{
		wrap: func(argv []string) []string {
			out := append([]string{exe}, global...)
			out = append(append(append(out, "exec", "-i"), c...), pod, "--")
			return append(out, argv...)
		},
		put: func(local, remotePath string) []string {
			out := append([]string{exe}, global...)
			return append(append(append(out, "cp"), c...), local, pod+":"+remotePath)
		},
	}, nil
}

// VarCommand is the generic command transport's template (gpush_command):
// a list of strings, the local argv that runs a command on the target.
const VarCommand = "gpush_command"

// newCommandTransport is gpush_command's: a site's own program, as
// ClusterShell's ExecWorker. The template is an argv, never a shell
// string: each element is used as one argument, with placeholders
// substituted inside it:
//
//	{host}     the target's address (ansible_host, else the inventory name)
//	{name}     the inventory name
//	{user}     ansible_user ("" when unset)
//	{argv}     as a whole element: the command's arguments, one element each
//	{argv_sh}  inside an element: the command quoted for a POSIX shell, for
//	           a template whose far end runs a shell (ssh, srun sh -c)
//	{{ }}      literal braces
//
// Exactly one element holds {argv} or {argv_sh}. The helper is copied
// through stdin (sh -c 'cat > "$1"' on the target).
func newCommandTransport(t Host) (Transport, error) {
	v, ok := t.Vars[VarCommand]
	if !ok || v == nil {
		return nil, fmt.Errorf("%s: ansible_connection=gpush_command needs %s, a list of strings such as [srun, -w, \"{host}\", \"{argv}\"]", t.Name, VarCommand)
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s: %s must be a list of strings (an argv, never a shell string), got %v", t.Name, VarCommand, v)
	}
	tmpl := make([]string, len(list))
	for i, e := range list {
		s, ok := e.(string)
		if !ok {
			return nil, fmt.Errorf("%s: %s[%d] must be a string, got %v", t.Name, VarCommand, i, e)
		}
		tmpl[i] = s
	}
	return CommandTemplate(t, tmpl)
}

// CommandTemplate is the command transport of a gpush_command template
// (see newCommandTransport).
func CommandTemplate(t Host, tmpl []string) (Transport, error) {
	if len(tmpl) == 0 {
		return nil, fmt.Errorf("%s: %s is empty", t.Name, VarCommand)
	}
	holes := 0
	for i, e := range tmpl {
		if e == "{argv}" || strings.Contains(e, "{argv_sh}") {
			holes++
		} else if strings.Contains(e, "{argv}") {
			return nil, fmt.Errorf("%s: %s[%d] %q: {argv} must be a whole element (use {argv_sh} inside one)", t.Name, VarCommand, i, e)
		}
	}
	if holes != 1 {
		return nil, fmt.Errorf("%s: %s must hold {argv} or {argv_sh} in exactly one element, found %d", t.Name, VarCommand, holes)
	}
	if tmpl[0] == "{argv}" || strings.HasPrefix(tmpl[0], "{argv") {
		return nil, fmt.Errorf("%s: %s[0] must be the program, not the command", t.Name, VarCommand)
	}
	return &commandTransport{wrap: func(argv []string) []string {
		out := make([]string, 0, len(tmpl)+len(argv))
		for _, e := range tmpl {
			if e == "{argv}" {
				out = append(out, argv...)
				continue
			}
			out = append(out, substitute(e, t, argv))
		}
		return out
	}}, nil
}

// substitute replaces the placeholders in one template element, in one
// pass (a value holding "{host}" is not substituted again).
func substitute(e string, t Host, argv []string) string {
	var b strings.Builder
	for len(e) > 0 {
		switch {
		case strings.HasPrefix(e, "{{"):
			b.WriteByte('{')
			e = e[2:]
		case strings.HasPrefix(e, "}}"):
			b.WriteByte('}')
			e = e[2:]
		case strings.HasPrefix(e, "{host}"):
			b.WriteString(t.Address)
			e = e[len("{host}"):]
		case strings.HasPrefix(e, "{name}"):
			b.WriteString(t.Name)
			e = e[len("{name}"):]
		case strings.HasPrefix(e, "{user}"):
			b.WriteString(t.User)
			e = e[len("{user}"):]
		case strings.HasPrefix(e, "{argv_sh}"):
			b.WriteString(ShellJoin(argv))
			e = e[len("{argv_sh}"):]
		default:
			b.WriteByte(e[0])
			e = e[1:]
		}
	}
	return b.String()
}
