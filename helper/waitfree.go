package helper

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
)

// BaselineMiB is the per-GPU idle allowance used when a wait-free request
// gives no threshold. Recent drivers leave the driver/firmware reserve out
// of memory.used (the H200 fixture reads 0 MiB idle), but older drivers,
// persistence mode and MIG show a few MiB to a few tens of MiB on an idle
// GPU; a CUDA context alone is several hundred MiB, so 64 MiB tells "idle"
// from "something still allocated" on every GPU gpush targets. A request
// that wants an exact bound sets ThresholdMiB (0 included).
const BaselineMiB int64 = 64

// Wait-free timing defaults.
const (
	DefaultWaitInterval = 100 * time.Millisecond
	DefaultWaitTimeout  = 30 * time.Second
)

// waitPollHook, when set by tests, runs after each poll (n counts from 1).
var waitPollHook func(n int)

// WaitFree polls until each chosen GPU's used memory is at or under its
// threshold and no holder of those GPUs is left, or Timeout passes. Each
// poll is one --query-gpu call plus one /proc scan. Protected holders
// (nvidia-persistenced, ...) never block: they hold every GPU by design and
// are never killed. Holders of only shared devices block unless
// IgnoreShared. A GPU whose memory nvidia-smi cannot report ([N/A]), or a
// host without nvidia-smi, is judged by holders alone (Reason says so); a
// failing or hung nvidia-smi is an error.
func WaitFree(ctx context.Context, req WaitFreeRequest) (*WaitFreeResponse, error) {
	start := time.Now()
	interval, timeout := req.Interval.D(), req.Timeout.D()
	if interval <= 0 {
		interval = DefaultWaitInterval
	}
	if timeout <= 0 {
		timeout = DefaultWaitTimeout
	}
	if req.ThresholdMiB != nil && *req.ThresholdMiB < 0 {
		return nil, fmt.Errorf("threshold_mib %d: must be >= 0", *req.ThresholdMiB)
	}
	s, err := newScanner(req.Config)
	if err != nil {
		return nil, err
	}
	smi, findErr := newSMIRunner(req.Config)
	resp := &WaitFreeResponse{Version: Version, Timeline: []Sample{}, ThresholdMiB: map[int]int64{}}

	var (
		initial = map[Identity]bool{}
		want    map[int]bool
		notes   []string
		last    gpuState
		block   []Holder
	)
	deadline := start.Add(timeout)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("interrupted after %d polls: %w", resp.Polls, ctx.Err())
		case <-timer.C:
		}
		pollStart := time.Now()
		gs, err := s.readGPUs(ctx, smi, findErr)
		if err != nil {
			return nil, fmt.Errorf("wait-free poll %d: %w", resp.Polls+1, err)
		}
		holders, _, err := s.collect(gs.mapping)
		if err != nil {
			return nil, fmt.Errorf("wait-free poll %d: %w", resp.Polls+1, err)
		}
		resp.Polls++
		last = gs
		if want == nil {
			if want, notes, err = chooseGPUs(req, gs); err != nil {
				return nil, err
			}
			for _, g := range gs.gpus {
				if want[g.Index] {
					resp.ThresholdMiB[g.Index] = threshold(req)
				}
			}
		}
		block = blocking(holders, want, req.IgnoreShared)
		sample := Sample{T: Duration(pollStart.Sub(start)), UsedMiB: map[int]int64{}, Holders: len(block)}
		memOK := true
		for _, g := range gs.gpus {
			if !want[g.Index] {
				continue
			}
			sample.UsedMiB[g.Index] = g.MemUsedMiB
			if g.MemUsedMiB >= 0 && g.MemUsedMiB > resp.ThresholdMiB[g.Index] {
				memOK = false
			}
		}
		resp.Timeline = append(resp.Timeline, sample)
		if waitPollHook != nil {
			waitPollHook(resp.Polls)
		}
		var fresh []Holder
		for _, h := range block {
			if resp.Polls == 1 {
				initial[h.Identity] = true
			} else if !initial[h.Identity] {
				fresh = append(fresh, h)
			}
		}
		switch {
		case len(fresh) > 0:
			resp.Outcome = WaitNewHolder
			resp.Reason = "new holder appeared: " + describeHolders(fresh)
		case len(block) == 0 && memOK:
			resp.Outcome, resp.OK = WaitFreed, true
		case !time.Now().Before(deadline):
			if len(block) > 0 {
				resp.Outcome = WaitTimedOut
				resp.Reason = fmt.Sprintf("after %s still held by %s", timeout, describeHolders(block))
			} else {
				resp.Outcome = WaitMemoryHeld
				resp.Reason = "no holder left but memory still used: " + overThreshold(gs.gpus, want, resp.ThresholdMiB)
			}
		}
		if resp.Outcome != "" {
			break
		}
		next := pollStart.Add(interval)
		if next.After(deadline) {
			next = deadline
		}
		timer.Reset(time.Until(next))
	}
	resp.GPUs = []GPU{}
	for _, g := range last.gpus {
		if want[g.Index] {
			resp.GPUs = append(resp.GPUs, g)
		}
	}
	resp.Holders = block
	if resp.Holders == nil {
		resp.Holders = []Holder{}
	}
	if len(block) > 0 && last.smiOK {
		// Memory per holder only when someone will read it.
		if apps, err := smi.queryApps(ctx); err != nil {
			notes = append(notes, "holders' memory unknown: "+err.Error())
		} else {
			mergeApps(resp.Holders, apps)
		}
	}
	if len(notes) > 0 {
		if resp.Reason != "" {
			resp.Reason += "; "
		}
		resp.Reason += strings.Join(notes, "; ")
	}
	resp.Elapsed = Duration(time.Since(start))
	return resp, nil
}

func threshold(req WaitFreeRequest) int64 {
	if req.ThresholdMiB != nil {
		return *req.ThresholdMiB
	}
	return BaselineMiB
}

// chooseGPUs resolves the request's GPU list against what the host has.
func chooseGPUs(req WaitFreeRequest, gs gpuState) (map[int]bool, []string, error) {
	want := map[int]bool{}
	have := map[int]bool{}
	for _, g := range gs.gpus {
		have[g.Index] = true
	}
	var notes []string
	if len(req.GPUs) == 0 {
		for i := range have {
			want[i] = true
		}
	}
	for _, i := range req.GPUs {
		if len(gs.gpus) > 0 && !have[i] {
			return nil, nil, fmt.Errorf("gpu %d: no such GPU on this host (it has %v)", i, sortedKeys(have))
		}
		want[i] = true
	}
	if !gs.smiOK {
		notes = append(notes, "no nvidia-smi: judged by holders only")
	}
	for _, g := range gs.gpus {
		if want[g.Index] && g.MemUsedMiB < 0 && gs.smiOK {
			notes = append(notes, fmt.Sprintf("GPU %d memory not reported by nvidia-smi: judged by holders only", g.Index))
		}
	}
	return want, notes, nil
}

// blocking are the holders that keep the chosen GPUs from being free.
func blocking(holders []Holder, want map[int]bool, ignoreShared bool) []Holder {
	var out []Holder
	for _, h := range holders {
		if h.Protected {
			continue
		}
		if h.SharedOnly {
			if !ignoreShared {
				out = append(out, h)
			}
			continue
		}
		for _, g := range h.GPUs {
			if want[g] || len(want) == 0 {
				out = append(out, h)
				break
			}
		}
		if len(h.GPUs) == 0 && !h.SharedOnly {
			// Holds a /dev/nvidiaN no GPU maps to: cannot rule it out.
			out = append(out, h)
		}
	}
	return out
}

func describeHolders(hs []Holder) string {
	parts := make([]string, 0, len(hs))
	for i, h := range hs {
		if i == 5 {
			parts = append(parts, fmt.Sprintf("and %d more", len(hs)-5))
			break
		}
		parts = append(parts, fmt.Sprintf("pid %d (%s) gpus %v", h.PID, h.Comm, h.GPUs))
	}
	return strings.Join(parts, ", ")
}

func overThreshold(gpus []GPU, want map[int]bool, th map[int]int64) string {
	var parts []string
	for _, g := range gpus {
		if want[g.Index] && g.MemUsedMiB > th[g.Index] {
			parts = append(parts, fmt.Sprintf("GPU %d %d MiB > %d MiB", g.Index, g.MemUsedMiB, th[g.Index]))
		}
	}
	return strings.Join(parts, ", ")
}

func sortedKeys(m map[int]bool) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}
