package modules

// The words a destructive call's result has in status (docs/lua-api.md,
// "Results"): one small set for every module, so that a script branches on
// the same words whatever it called.
const (
	// StatusDone: the call did what was asked and verified it (ok).
	StatusDone = "done"
	// StatusWould: under check nothing was done; would holds the plan (ok).
	StatusWould = "would"
	// StatusFailed: the call ended with a verdict that is not ok
	// (survivors, memory still held, a unit that would not stop).
	StatusFailed = "failed"
	// StatusExpired: the deadline bounding the call's wait (its timeout
	// option) passed before a verdict.
	StatusExpired = "expired"
)

// StatusOf is done or failed.
func StatusOf(ok bool) string {
	if ok {
		return StatusDone
	}
	return StatusFailed
}
