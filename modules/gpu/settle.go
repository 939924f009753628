package gpu

import "time"

// DefaultSettle is how long GPUs must stay free after a kill or stop while
// a manager whose restart delay is unknown may restart a worker (a live
// parent of a killed holder): WorkerOpenTime and a margin for a supervisor
// that restarts at once. Where the delay is known, SettleFor derives the
// settle from it instead.
const DefaultSettle = 10 * time.Second
