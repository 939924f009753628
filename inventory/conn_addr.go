package inventory

import (
	"net"
	"strings"
)

// isZonedIPv6 tells an IPv6 address with a zone ("fe80::1%eth0"), which
// Ansible's host list and patterns take as one host although it has colons.
func isZonedIPv6(s string) bool {
	addr, zone, ok := strings.Cut(s, "%")
	if !ok || zone == "" || strings.ContainsAny(zone, "[]:,%/ \t") || !strings.Contains(addr, ":") {
		return false
	}
	return net.ParseIP(addr) != nil
}

// splitZonedIPv6 reads "fe80::1%eth0" or "[fe80::1%eth0]:2222" (port "" if
// none); ok is false for anything else.
func splitZonedIPv6(s string) (addr, port string, ok bool) {
	if isZonedIPv6(s) {
		return s, "", true
	}
	if !strings.HasPrefix(s, "[") {
		return "", "", false
	}
	end := strings.IndexByte(s, ']')
	if end < 0 || !isZonedIPv6(s[1:end]) {
		return "", "", false
	}
	switch rest := s[end+1:]; {
	case rest == "":
		return s[1:end], "", true
	case strings.HasPrefix(rest, ":") && len(rest) > 1:
		return s[1:end], rest[1:], true
	}
	return "", "", false
}
