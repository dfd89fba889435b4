package eventjson

import (
	"bytes"
	"errors"

	"github.com/kvidx/kvidx/engine"
)

// ErrNoEvents is returned by [DecodeBatch] for a body holding no event.
var ErrNoEvents = errors.New("no events")

// DecodeBatch decodes a request body holding either NDJSON (one event per
// line) or a JSON array of events, telling them apart by the first non-space
// byte ('[' means an array). It decodes the whole body or nothing: an error
// is a [*LineError] (1-based line) for NDJSON or an [*ElementError] (0-based
// index) for an array, or wraps [ErrNoEvents] when the body holds no event.
//
// All events' blocks share one allocation, and so do their removed hashes;
// each event's slices are capped, so appending to one cannot clobber another.
func DecodeBatch(body []byte) ([]engine.Event, error) {
	s := scanner{data: body}
	// Size the shared arrays once, from the body: a block object takes at
	// least 32 bytes, and realistic ones about twice that.
	// Events are counted by lines, but no more than the body can hold:
	// blank lines (or a pretty-printed array) would otherwise reserve an
	// Event (over 100 bytes) per newline byte, 1.9 GB for a 16 MiB body.
	b := batch{
		events: make([]engine.Event, 0, min(bytes.Count(body, []byte{'\n'}), len(body)/minEventBytes)+1),
		blocks: make([]engine.Block, 0, len(body)/64),
	}
	var err error
	if s.peek() == '[' {
		err = b.decodeArray(&s)
	} else {
		err = b.decodeLines(body)
	}
	if err != nil {
		return nil, err
	}
	if len(b.events) == 0 {
		return nil, ErrNoEvents
	}
	return b.finish(), nil
}

// minEventBytes is the length of the shortest event,
// {"worker_id":0,"event":{"data":"cleared"}}.
const minEventBytes = 42

// batch accumulates events whose slices are assigned only at the end, once
// the shared backing arrays have stopped growing.
type batch struct {
	events []engine.Event
	spans  []span
	blocks []engine.Block
	hashes []uint64
}

type span struct{ b0, b1, h0, h1 int }

func (b *batch) decodeOne(s *scanner) error {
	sp := span{b0: len(b.blocks), h0: len(b.hashes)}
	var ev engine.Event
	if err := decodeEvent(s, &ev, &b.blocks, &b.hashes); err != nil {
		return err
	}
	sp.b1, sp.h1 = len(b.blocks), len(b.hashes)
	b.events = append(b.events, ev)
	b.spans = append(b.spans, sp)
	return nil
}

func (b *batch) decodeLines(body []byte) error {
	var s scanner
	for n := 1; len(body) > 0; n++ {
		line, rest, _ := bytes.Cut(body, []byte{'\n'})
		body = rest
		s = scanner{data: line, scratch: s.scratch[:0]}
		if s.atEnd() {
			continue // blank line
		}
		err := b.decodeOne(&s)
		if err == nil {
			err = s.end()
		}
		if err != nil {
			return &LineError{Line: n, Err: err}
		}
	}
	return nil
}

func (b *batch) decodeArray(s *scanner) error {
	s.pos++ // '['
	for first, i := true, 0; ; i++ {
		more, err := s.element(&first)
		if err != nil {
			return &ElementError{Index: i, Err: err}
		}
		if !more {
			break
		}
		if err := b.decodeOne(s); err != nil {
			return &ElementError{Index: i, Err: err}
		}
	}
	return s.end()
}

func (b *batch) finish() []engine.Event {
	for i, sp := range b.spans {
		ev := &b.events[i]
		if sp.b1 > sp.b0 {
			ev.Blocks = b.blocks[sp.b0:sp.b1:sp.b1]
		}
		if sp.h1 > sp.h0 {
			ev.BlockHashes = b.hashes[sp.h0:sp.h1:sp.h1]
		}
	}
	return b.events
}
