package remote

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// A hop is completed by Options.CompleteHop: what it returns is dialled,
// except that the spec's own port and user win; the host's keys come after
// the hop's own.
func TestParseHopCompleted(t *testing.T) {
	var asked []Host
	o := Options{CompleteHop: func(hop Host) (Host, error) {
		asked = append(asked, hop)
		if !strings.HasPrefix(hop.Name, "bastion") {
			return Host{Name: hop.Name, Address: hop.Name, Port: hop.Port, User: hop.User}, nil
		}
		return Host{Name: hop.Name, Address: hop.Name + ".example.net", Port: 2200, User: "ops",
			IdentityFiles: []string{"/keys/bastion"}, IdentitiesOnly: true, ProxyCommand: "nc %h %p"}, nil
	}}.withDefaults()

	tg, err := parseHop("bastion1", o)
	if err != nil {
		t.Fatal(err)
	}
	if tg.host != "bastion1.example.net" || tg.port != 2200 || tg.user != "ops" || !tg.identitiesOnly ||
		tg.proxyCommand != "nc %h %p" || tg.orig != "bastion1" || !tg.isHop || tg.name != "bastion1" {
		t.Fatalf("got %+v", tg)
	}
	if !reflect.DeepEqual(tg.keys, []string{"/keys/bastion"}) {
		t.Fatalf("keys %q", tg.keys)
	}

	tg, err = parseHop("root@bastion2:2022", o)
	if err != nil {
		t.Fatal(err)
	}
	if tg.host != "bastion2.example.net" || tg.port != 2022 || tg.user != "root" {
		t.Fatalf("spec must win: got host %q port %d user %q", tg.host, tg.port, tg.user)
	}
	want := Host{Name: "bastion2", Port: 2022, User: "root", Connection: "ssh"}
	if !reflect.DeepEqual(asked[1], want) {
		t.Fatalf("asked %+v, want %+v", asked[1], want)
	}

	// What the completion leaves unsaid: port 22, the local user.
	tg, err = parseHop("10.1.2.3", o)
	if err != nil {
		t.Fatal(err)
	}
	if tg.host != "10.1.2.3" || tg.port != 22 || tg.user != localUser() || len(tg.keys) != 0 || tg.proxyCommand != "" {
		t.Fatalf("got %+v", tg)
	}
}

// Without CompleteHop a hop is dialled as written; a completion's error
// names the hop.
func TestParseHopAsWritten(t *testing.T) {
	tg, err := parseHop("ops@[::1]:2022", Options{}.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if tg.host != "::1" || tg.port != 2022 || tg.user != "ops" || len(tg.keys) != 0 {
		t.Fatalf("got %+v", tg)
	}
	o := Options{CompleteHop: func(Host) (Host, error) { return Host{}, errors.New("bad Match exec") }}.withDefaults()
	if _, err := parseHop("jump", o); err == nil || !strings.Contains(err.Error(), `ProxyJump hop "jump": bad Match exec`) {
		t.Fatalf("err %v", err)
	}
}

// A URI hop reaching the dialer unread is refused, never dialled with
// "ssh://user" as its user (lua.RemoteHost reads the URI form).
func TestParseHopURIRefused(t *testing.T) {
	if _, err := parseHop("ssh://user@host:2223", Options{}.withDefaults()); err == nil || !strings.Contains(err.Error(), "URI hop") {
		t.Fatalf("err %v", err)
	}
}
