package gpu

import "time"

// DefaultSettle is how long GPUs must stay free after a kill or stop while
// something that may restart a worker remains (a live parent of a killed
// holder, a unit with Restart=): long enough for a supervisor to restart a
// CUDA worker and for that worker to open the device again. A provisional
// value until the lead measures the real restart-to-open time on the H200
// (hw/h200); the helper does not define one yet.
const DefaultSettle = 10 * time.Second
