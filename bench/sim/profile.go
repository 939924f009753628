package main

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// labelShare reads a CPU profile (runtime/pprof's gzipped protobuf) and
// returns the CPU nanoseconds of the samples whose label key has value val,
// and of all samples. Only the fields it needs are decoded (profile.proto:
// Profile.sample = 2, Profile.string_table = 6; Sample.value = 2,
// Sample.label = 3; Label.key = 1, Label.str = 2); the CPU time is the
// last value of each sample (samples/count, cpu/nanoseconds).
func labelShare(prof []byte, key, val string) (labelled, total int64, err error) {
	zr, err := gzip.NewReader(bytes.NewReader(prof))
	if err != nil {
		return 0, 0, fmt.Errorf("cpu profile: %w", err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return 0, 0, fmt.Errorf("cpu profile: %w", err)
	}
	type sample struct {
		ns     int64
		labels [][2]int64 // key, str: string table indices
	}
	var samples []sample
	var strs []string
	err = fields(raw, func(num int, wire int, v uint64, b []byte) error {
		switch {
		case num == 6 && wire == 2:
			strs = append(strs, string(b))
		case num == 2 && wire == 2:
			var s sample
			err := fields(b, func(num int, wire int, v uint64, b []byte) error {
				switch {
				case num == 2 && wire == 0:
					s.ns = int64(v)
				case num == 2 && wire == 2: // packed values: keep the last
					for len(b) > 0 {
						x, n := binary.Uvarint(b)
						if n <= 0 {
							return errors.New("bad packed value")
						}
						s.ns, b = int64(x), b[n:]
					}
				case num == 3 && wire == 2:
					var l [2]int64
					err := fields(b, func(num int, wire int, v uint64, _ []byte) error {
						if wire == 0 && (num == 1 || num == 2) {
							l[num-1] = int64(v)
						}
						return nil
					})
					if err != nil {
						return err
					}
					s.labels = append(s.labels, l)
				}
				return nil
			})
			if err != nil {
				return err
			}
			samples = append(samples, s)
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("cpu profile: %w", err)
	}
	str := func(i int64) string {
		if i < 0 || int(i) >= len(strs) {
			return ""
		}
		return strs[i]
	}
	for _, s := range samples {
		total += s.ns
		for _, l := range s.labels {
			if str(l[0]) == key && str(l[1]) == val {
				labelled += s.ns
				break
			}
		}
	}
	return labelled, total, nil
}

// fields calls fn for each field of a protobuf message: varints as v,
// length-delimited ones as b; fixed-width ones are skipped.
func fields(b []byte, fn func(num int, wire int, v uint64, b []byte) error) error {
	for len(b) > 0 {
		tag, n := binary.Uvarint(b)
		if n <= 0 {
			return errors.New("bad tag")
		}
		b = b[n:]
		num, wire := int(tag>>3), int(tag&7)
		switch wire {
		case 0:
			v, n := binary.Uvarint(b)
			if n <= 0 {
				return errors.New("bad varint")
			}
			b = b[n:]
			if err := fn(num, wire, v, nil); err != nil {
				return err
			}
		case 1:
			if len(b) < 8 {
				return errors.New("short fixed64")
			}
			b = b[8:]
		case 2:
			l, n := binary.Uvarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				return errors.New("bad length")
			}
			body := b[n : n+int(l)]
			b = b[n+int(l):]
			if err := fn(num, wire, 0, body); err != nil {
				return err
			}
		case 5:
			if len(b) < 4 {
				return errors.New("short fixed32")
			}
			b = b[4:]
		default:
			return fmt.Errorf("wire type %d", wire)
		}
	}
	return nil
}
