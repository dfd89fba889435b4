package wal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/golang/snappy"
)

// Read-only access for inspection tools (kvidx wal dump, wal stat, recover
// --dry-run). Unlike [Open], nothing here renames, truncates, creates,
// deletes or locks a file: it is safe on the directory of a running server.
// It reads the segment files as tidwall/wal would see them once it has
// finished an interrupted truncation (.START/.END names), without finishing
// it, and it reports a torn tail (what Open would cut) instead of cutting it.
// Damage inside the log is reported by segment file and byte offset. A
// segment other than the last whose framing breaks anywhere (even in bytes
// after its whole entries) is reported as one gap from its first entry up
// to the next segment: tidwall/wal parses such a segment whole when reading
// it and fails on every entry, though Open, which reads only the last
// segment, accepts the log. [FindGaps] finds the same gaps from the
// segments' framing alone, for recovery to check before a replay;
// [Segments] lists the segment files.

// SegmentInfo describes one segment file as the read-only reader sees it.
type SegmentInfo struct {
	Name       string `json:"name"`        // file name, possibly with a .START/.END suffix
	FirstIndex uint64 `json:"first_index"` // index of its first entry
	Entries    uint64 `json:"entries"`     // complete entries (tidwall/wal framing)
	Bytes      int64  `json:"bytes"`       // file size
}

// Layout is what [Inspect] and [Scan] find in a WAL directory.
type Layout struct {
	// Segments are the segment files tidwall/wal would use, in order.
	Segments []SegmentInfo `json:"segments"`
	// Ignored are segment files an interrupted truncation leaves behind
	// (Open would delete them).
	Ignored []string `json:"ignored,omitempty"`
	// Pending names an interrupted truncation's .START or .END file ("" if none).
	Pending string `json:"pending,omitempty"`
	// FirstIndex and LastIndex are what the log would report after Open,
	// the torn tail cut (FirstIndex > LastIndex: empty).
	FirstIndex uint64 `json:"first_index"`
	LastIndex  uint64 `json:"last_index"`
	// Entries counts the entries the log could read: whole, passing their
	// frame check, not in the torn tail, not in a segment tidwall/wal
	// cannot read (see Gaps), each index once. With gaps or damage it is
	// less than LastIndex-FirstIndex+1.
	Entries uint64 `json:"entries"`
	// Bytes is the size of every segment file, the last one's unused fill
	// left out (see UnusedBytes); FramedBytes the entry
	// payloads (frame header plus compressed batch) of the valid entries;
	// DecodedBytes their uncompressed batches.
	Bytes        int64 `json:"bytes"`
	FramedBytes  int64 `json:"framed_bytes"`
	DecodedBytes int64 `json:"decoded_bytes"`
	// TornSegment, TornOffset and TornBytes describe a torn tail: the last
	// segment ends in an incomplete or invalid entry that no valid entry
	// follows; Open would cut TornBytes bytes from TornOffset.
	TornSegment string `json:"torn_segment,omitempty"`
	TornOffset  int64  `json:"torn_offset,omitempty"`
	TornBytes   int64  `json:"torn_bytes"`
	// UnusedBytes is the fill (0xA5 bytes) that ends the last segment
	// after its entries: space a running writer preallocated (or one that
	// stopped without closing the log), not part of the log and not
	// damage. Zeros there are a torn tail.
	UnusedBytes int64 `json:"unused_bytes"`
	// Gaps describe missing or unreadable runs of entries between segments
	// (as recovery finds them); Damage, entries failing their checks
	// elsewhere than a torn tail, each naming the segment and byte offset.
	Gaps   []Gap    `json:"gaps,omitempty"`
	Damage []Damage `json:"damage,omitempty"`
}

// Gap is a run of entries From..To that the segment files do not hold whole.
// Keep is the last entry a cut after which (kvidx wal repair
// --truncate-after Keep) leaves the log whole up to it: From-1, or, where a
// segment's framing breaks after whole entries that tidwall/wal cannot read
// only because of what follows them, the last of those.
//
// Stray, when not 0, is how many stray bytes end the segment that breaks
// (see StrayBytes): [RepairTrimStray] (kvidx wal repair --trim-stray)
// removes them and closes the gap, losing nothing.
type Gap struct {
	From, To, Keep uint64
	Stray          int64
	// Broken: the segment holding From..To (named From) is there, and
	// its framing breaks: [RepairTruncateBefore] may find an entry of it
	// past the break by the index its frame carries (see [HoldsIndexed]).
	Broken bool
	Desc   string
}

// Damage is an entry that fails its checks, or a framing break, inside the log.
type Damage struct {
	Segment string
	Offset  int64
	Index   uint64 // the entry's index (the first unreadable one for a framing break)
	Desc    string
}

func (d Damage) String() string {
	return fmt.Sprintf("segment %s offset %d: entry %d: %s", d.Segment, d.Offset, d.Index, d.Desc)
}

// Err is what is wrong, as an error that matches [ErrCorrupt] (for an
// [EntryError]); Desc often says "wal corrupt" already, and wrapping it
// again repeated it.
func (d Damage) Err() error { return damageDesc(d.Desc) }

type damageDesc string

func (d damageDesc) Error() string      { return string(d) }
func (damageDesc) Is(target error) bool { return target == ErrCorrupt }

// resolveSegments returns the segments tidwall/wal would use after finishing
// an interrupted truncation, the ones it would delete, and the pending
// .START/.END file name.
func resolveSegments(segs []segFile) (use []segFile, ignored []string, pending string, err error) {
	startIdx, endIdx := -1, -1
	for i, s := range segs {
		switch s.kind {
		case ".START":
			startIdx = i
		case ".END":
			if endIdx == -1 {
				endIdx = i
			}
		}
	}
	if startIdx != -1 && endIdx != -1 {
		return nil, nil, "", fmt.Errorf("both %s and %s exist (tidwall/wal refuses to open): %w", segs[startIdx].name, segs[endIdx].name, ErrCorrupt)
	}
	use = segs
	if startIdx != -1 {
		pending = segs[startIdx].name
		for _, s := range segs[:startIdx] {
			ignored = append(ignored, s.name)
		}
		use = segs[startIdx:]
	}
	if endIdx != -1 {
		pending = segs[endIdx].name
		for _, s := range segs[endIdx+1:] {
			ignored = append(ignored, s.name)
		}
		use = segs[:endIdx+1]
		if n := len(use); n > 1 && use[n-2].index == use[n-1].index {
			ignored = append(ignored, use[n-2].name)
			use = append(append([]segFile{}, use[:n-2]...), use[n-1])
		}
	}
	return use, ignored, pending, nil
}

// Inspect walks every segment of the WAL in dir read-only and returns its
// layout: segments, index range, sizes, compression, torn tail, gaps and
// damaged entries. It checks every entry's frame (CRC) but decodes none. A
// missing directory is an empty log. The error is for I/O failures and for
// what Open would refuse (damage followed by valid entries in the last
// segment, conflicting truncation files); the layout found so far is
// returned with it.
func Inspect(dir string) (Layout, error) {
	return walk(dir, 1, 0, nil)
}

// Scan calls fn, in index order, with every entry of the WAL in dir from
// index from (0: the first) to index to (0: the last), reading the segment
// files read-only (see [Inspect]). An entry that cannot be read or decoded
// within the range, or a gap in it, ends the scan with an error wrapping
// [ErrCorrupt] that names the segment and byte offset (damage after the
// range is only listed in Layout.Damage); a torn tail is not
// an error (it is not part of the log: see Layout.TornBytes). A range
// starting before the first index fails with [ErrTruncated]. An error from
// fn ends the scan and is returned as is. The layout is returned in every
// case. On a live log, a segment file its TruncateFront removes or renames
// during the scan is not an error: the scan goes on from a new listing of
// the directory, and fails with ErrTruncated only if entries it had yet to
// yield were truncated.
func Scan(dir string, from, to uint64, fn func(Entry) error) (Layout, error) {
	if to == 0 {
		to = ^uint64(0)
	}
	return walk(dir, from, to, fn)
}

// walk is Inspect and Scan: entries from..to (from > to: none) are decoded
// and passed to fn. A live log's TruncateFront removes and renames segment
// files: one listed but gone when read is not an error; the walk starts
// again from a new listing, past the entries already passed to fn (if they
// were truncated meanwhile, the read fails with ErrTruncated as usual).
func walk(dir string, from, to uint64, fn func(Entry) error) (Layout, error) {
	rereads := 0
	for attempt := 0; ; attempt++ {
		lay, vanished, passed, err := walkOnce(dir, from, to, fn)
		// A read racing a live writer can copy a page of the last segment
		// before the writer fills it, and a later page after (the segment
		// is preallocated: see prealloc.go): damage followed by valid
		// entries. The writer fills the hole, so read again a few times
		// before reporting damage.
		//
		// TAIL is read before the listing, but a listing of a big
		// directory takes several system calls, between which
		// TruncateFront can rename the tail segment: it may miss both
		// names and read as a missing tail. Read again before refusing.
		again := vanished
		var (
			de *DamageError
			mt *MissingTailError
		)
		if !again && (errors.As(err, &de) || errors.As(err, &mt)) && rereads < 3 {
			rereads++
			time.Sleep(10 * time.Millisecond)
			again = true
		}
		if !again || attempt == 100 {
			return lay, err
		}
		if passed > 0 {
			if passed == ^uint64(0) {
				return lay, nil
			}
			from = passed + 1
		}
	}
}

// walkOnce is one walk over one listing of dir. vanished tells that a
// listed segment file was gone when read; passed is the index of the last
// entry passed to fn (0: none).
func walkOnce(dir string, from, to uint64, fn func(Entry) error) (lay Layout, vanished bool, passed uint64, err error) {
	// Read before the listing: a live writer's rollover names a segment
	// in TAIL only once it exists, so the listing holds it.
	mark, err := readTailMark(dir)
	if err != nil {
		return lay, false, passed, err
	}
	all, err := listSegments(dir)
	if errors.Is(err, os.ErrNotExist) {
		lay.FirstIndex, lay.LastIndex = 1, 0
		return lay, false, passed, nil
	}
	if err != nil {
		return lay, false, passed, fmt.Errorf("wal %s: %w", dir, err)
	}
	segs, ignored, pending, err := resolveSegments(all)
	lay.Ignored, lay.Pending = ignored, pending
	if err != nil {
		return lay, false, passed, fmt.Errorf("wal %s: %w", dir, err)
	}
	if len(segs) == 0 {
		lay.FirstIndex, lay.LastIndex = 1, 0
		return lay, false, passed, missingTail(&lay, dir, mark, segs)
	}
	lay.FirstIndex = segs[0].index
	if from == 0 {
		from = lay.FirstIndex
	}
	if fn != nil && from < lay.FirstIndex && from <= to {
		return lay, false, passed, fmt.Errorf("wal %s: read from %d, first index is %d: %w", dir, from, lay.FirstIndex, ErrTruncated)
	}
	var scanErr error
	inRange := func(a, b uint64) bool { return fn != nil && from <= to && b >= from && a <= to }
	fail := func(format string, args ...any) {
		if scanErr == nil {
			scanErr = fmt.Errorf("wal %s: "+format+": %w", append(append([]any{dir}, args...), ErrCorrupt)...)
		}
	}
	// A damaged entry is an EntryError, as reading it from an open log
	// gives, so that callers name the repair the same way.
	failEntry := func(e *EntryError) {
		if scanErr == nil {
			scanErr = e
		}
	}
	next := segs[0].index // index expected at the start of the next segment
	var prevStray int64   // the previous segment's stray bytes, when it overlaps the next
	files, err := openSegments(dir, segs)
	if err != nil {
		return lay, errors.Is(err, os.ErrNotExist), passed, err
	}
	defer func() {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	}()
	for si, s := range segs {
		data, err := readSegment(dir, s.name, files[si])
		if err != nil {
			return lay, errors.Is(err, os.ErrNotExist), passed, fmt.Errorf("wal %s: segment %s: %w", dir, s.name, err)
		}
		info := SegmentInfo{Name: s.name, FirstIndex: s.index, Bytes: int64(len(data))}
		last := si == len(segs)-1
		if last {
			lay.UnusedBytes = int64(unusedTail(data))
			data = data[:len(data)-int(lay.UnusedBytes)]
		}
		lay.Bytes += int64(len(data))
		if si > 0 {
			switch {
			case next < s.index:
				prev := segs[si-1].name
				g := Gap{From: next, To: s.index - 1, Keep: next - 1,
					Desc: SegmentsGapDesc(prev, segs[si-1].index, next, s.name, s.index, 0)}
				lay.Gaps = append(lay.Gaps, g)
				if inRange(g.From, g.To) {
					fail("%s", g.Desc)
				}
			case next > s.index:
				g := Gap{From: s.index, To: next - 1, Keep: s.index - 1, Stray: prevStray,
					Desc: SegmentsGapDesc(segs[si-1].name, segs[si-1].index, next, s.name, s.index, prevStray)}
				lay.Gaps = append(lay.Gaps, g)
				if inRange(g.From, g.To) {
					fail("%s", g.Desc)
				}
			}
		}
		// tidwall/wal reads a segment other than the last one whole, and
		// fails on every entry of it if its framing breaks anywhere, even
		// after the last whole entry (Open never reads it: only reading
		// does). Such a segment is unreadable up to the next segment,
		// which is also what recovery finds (no replay may cross it).
		broken := false
		if !last {
			if whole, boff, ok := Frames(data); !ok {
				broken = true
				end := segs[si+1].index
				lay.Damage = append(lay.Damage, Damage{Segment: s.name, Offset: int64(boff), Index: s.index,
					Desc: fmt.Sprintf("tidwall/wal framing breaks at byte %d of %d after %d whole entries: tidwall/wal reads the segment whole, so none of them can be read", boff, len(data), whole)})
				stray := StrayBytes(data, s.index, end)
				g := Gap{From: s.index, To: end - 1, Keep: s.index + min(whole, ValidPrefix(data, s.index)) - 1, Stray: stray, Broken: true,
					Desc: BrokenSegmentDesc(s.name, boff, len(data), whole, s.index, end, stray)}
				lay.Gaps = append(lay.Gaps, g)
				if inRange(g.From, g.To) {
					fail("%s", g.Desc)
				}
			}
		}
		off := 0
		index := s.index
		// zeros counts the empty frames of a run of zero bytes ending at
		// zerosEnd (see the damage below).
		zeros, zerosEnd := 0, -1
		// good is the end of the valid prefix of the last segment.
		good := -1
		for off < len(data) {
			p, n, ok := nextEntry(data[off:])
			if !ok {
				break
			}
			if ferr := checkFrameAt(p, index); ferr != nil {
				if last && good < 0 {
					good = off
				}
				d := Damage{Segment: s.name, Offset: int64(off), Index: index, Desc: ferr.Error()}
				if n := len(lay.Damage); len(p) == 0 && zeros > 0 && zerosEnd == off && n > 0 {
					// A run of zero bytes frames an empty entry at every
					// byte: one line for the run, not one a byte (found
					// by review: a 4 KiB zeroed tail printed 4,096).
					zeros++
					lay.Damage[n-1].Desc = fmt.Sprintf("%d zero bytes (%d empty frames, entries %d..%d): no entry", zeros, zeros, index-uint64(zeros)+1, index)
				} else {
					lay.Damage = append(lay.Damage, d)
					zeros = 0
					if len(p) == 0 {
						zeros = 1
					}
				}
				zerosEnd = off + n
				if !last && !broken && inRange(index, index) {
					failEntry(&EntryError{Dir: dir, Segment: s.name, Offset: int64(off), Entry: index, Err: d.Err()})
				}
			} else {
				// An entry of an earlier segment that the next one
				// overlaps is read from the next one (tidwall/wal picks
				// the last segment starting at or before an index).
				if !broken && (good < 0 || !last) && (last || index < segs[si+1].index) {
					lay.Entries++
				}
				if good < 0 {
					lay.FramedBytes += int64(len(p))
					if _, z, ferr := frameData(p); ferr == nil {
						if dl, derr := snappy.DecodedLen(z); derr == nil {
							lay.DecodedBytes += int64(dl)
						}
					}
				}
				if fn != nil && scanErr == nil && !broken && index >= from && index <= to && (good < 0 || !last) {
					events, positions, derr := decodeEntry(p, index)
					if derr != nil {
						failEntry(&EntryError{Dir: dir, Segment: s.name, Offset: int64(off), Entry: index, Err: asCorrupt(derr)})
					} else if ferr := fn(Entry{Index: index, Events: events, Positions: positions}); ferr != nil {
						return lay, false, passed, ferr
					} else {
						passed = index
					}
				}
			}
			off += n
			index++
			info.Entries++
		}
		if off < len(data) && last && good < 0 {
			// The framing breaks in the last segment: a torn tail (or worse).
			good = off
		}
		if last {
			lay.LastIndex = index - 1
			if good >= 0 {
				// What Open would do: cut from good, unless a valid entry
				// starts anywhere after it (damage inside the log).
				whole, _, _ := Frames(data[:good])
				lay.LastIndex = s.index + whole - 1
				if p := validAtOrAfter(data, good); p >= 0 {
					lay.Segments = append(lay.Segments, info)
					derr := &DamageError{Dir: dir, Segment: s.name, Offset: int64(good), Next: int64(p), Entry: lay.LastIndex + 1, Found: storedIndexAt(data, good, p)}
					if fn != nil && to <= lay.LastIndex {
						// The scan's range ends before the damage, and every
						// entry of it was read whole: salvaging the entries
						// before damage is what such a scan is for.
						lay.Damage = append(lay.Damage, Damage{Segment: s.name, Offset: int64(good), Index: derr.Entry, Desc: derr.what()})
						return lay, false, passed, scanErr
					}
					return lay, false, passed, derr
				}
				lay.TornSegment, lay.TornOffset, lay.TornBytes = s.name, int64(good), int64(len(data)-good)
				// Entries after good were counted as damage: they are the tail.
				kept := lay.Damage[:0]
				for _, d := range lay.Damage {
					if d.Segment != s.name || d.Offset < int64(good) {
						kept = append(kept, d)
					}
				}
				lay.Damage = kept
				info.Entries = lay.LastIndex + 1 - s.index
			}
		} else if broken {
			// The gap recorded above already covers up to the next segment.
			next = segs[si+1].index
		} else {
			next = index
			if next > segs[si+1].index {
				// Frames past the entries the segment should hold: the
				// next segment's overlap gap says whether they are stray.
				prevStray = StrayBytes(data, s.index, segs[si+1].index)
			}
		}
		lay.Segments = append(lay.Segments, info)
	}
	if err := missingTail(&lay, dir, mark, segs); err != nil && scanErr == nil && (fn == nil || to > lay.LastIndex) {
		// A scan whose range ends before the missing entries read all
		// it was asked for, as with damage after its range.
		scanErr = err
	}
	return lay, false, passed, scanErr
}

// missingTail is what Open's check of TAIL (see tailmark.go) finds in a
// walk's layout: the refusal, also listed as a gap after the last entry.
func missingTail(lay *Layout, dir string, mark uint64, segs []segFile) error {
	err := checkTail(dir, mark, segs, lay.LastIndex)
	var mt *MissingTailError
	if errors.As(err, &mt) {
		lay.Gaps = append(lay.Gaps, Gap{From: lay.LastIndex + 1, To: lay.LastIndex + 1, Keep: lay.LastIndex, Desc: mt.Where()})
	}
	return err
}

// Frames walks b's tidwall/wal framing (uvarint length, then that many
// bytes): it returns how many whole entries b holds, where the framing
// stops, and whether that is the end of b. It checks tidwall/wal's framing
// only, not what each entry holds (kvidx's frame: version, checksum, index;
// see [Scan]).
func Frames(b []byte) (n uint64, off int, ok bool) {
	for off < len(b) {
		_, k, ok := nextEntry(b[off:])
		if !ok {
			return n, off, false
		}
		off += k
		n++
	}
	return n, off, true
}

// maxOpenSegments bounds the descriptors a walk holds at once.
const maxOpenSegments = 256

// openSegments opens the segment files of a listing before any is read: a
// live log's TruncateFront deletes the first ones meanwhile, and an open
// file stays readable, so a walk reads the log as listed instead of
// failing to reach entries the truncation passed (a long wal dump on a
// busy server did). A file already gone is an os.ErrNotExist error (list
// again). Beyond maxOpenSegments, or when the process is out of
// descriptors, the rest stay nil and are opened as they are read.
func openSegments(dir string, segs []segFile) ([]*os.File, error) {
	files := make([]*os.File, len(segs))
	for i, s := range segs {
		if i == maxOpenSegments {
			break
		}
		f, err := os.Open(filepath.Join(dir, s.name))
		if errors.Is(err, os.ErrNotExist) {
			for _, f := range files[:i] {
				f.Close()
			}
			return nil, fmt.Errorf("wal %s: segment %s: %w", dir, s.name, err)
		}
		if err != nil {
			break
		}
		files[i] = f
	}
	return files, nil
}

// readSegment reads a segment from f, opened by openSegments, or by name
// when f is nil.
func readSegment(dir, name string, f *os.File) ([]byte, error) {
	if f == nil {
		return os.ReadFile(filepath.Join(dir, name))
	}
	return io.ReadAll(f)
}
