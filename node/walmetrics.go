package node

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/kvidx/kvidx/wal"
)

// WALFaults injects failures into the WAL store wrapped by
// [NewWALInstrument], for tests: while an error is set, every Write (or Sync)
// fails with it, wrapped, without reaching the real store. The zero value
// injects nothing; methods are safe for concurrent use.
type WALFaults struct {
	write atomic.Pointer[error]
	sync  atomic.Pointer[error]
}

// FailWrites makes every following Write fail with err (nil: stop failing).
func (f *WALFaults) FailWrites(err error) { f.write.Store(errPtr(err)) }

// FailSyncs makes every following Sync fail with err (nil: stop failing).
func (f *WALFaults) FailSyncs(err error) { f.sync.Store(errPtr(err)) }

func errPtr(err error) *error {
	if err == nil {
		return nil
	}
	return &err
}

func (f *WALFaults) writeErr() error {
	if f == nil {
		return nil
	}
	return deref(f.write.Load())
}

func (f *WALFaults) syncErr() error {
	if f == nil {
		return nil
	}
	return deref(f.sync.Load())
}

func deref(e *error) error {
	if e == nil {
		return nil
	}
	return *e
}

// NewWALInstrument returns a wrapper for [wal.Options].WrapStore that times
// each entry write (kvidx_wal_commit_duration_seconds) and fsync
// (kvidx_wal_fsync_duration_seconds), counts the bytes written
// (kvidx_wal_bytes_total) and failures, and injects the failures set in
// faults (which may be nil).
func NewWALInstrument(m *Metrics, faults *WALFaults) func(wal.Store) wal.Store {
	return func(s wal.Store) wal.Store { return &instrumentedStore{next: s, m: m, faults: faults} }
}

type instrumentedStore struct {
	next   wal.Store
	m      *Metrics
	faults *WALFaults
}

func (s *instrumentedStore) Write(index uint64, data []byte) error {
	if err := s.faults.writeErr(); err != nil {
		s.m.walWriteErrors.Inc()
		return fmt.Errorf("wal entry %d: injected write failure: %w", index, err)
	}
	start := time.Now()
	err := s.next.Write(index, data)
	s.m.walCommit.Observe(time.Since(start).Seconds())
	if err != nil {
		s.m.walWriteErrors.Inc()
		return err
	}
	s.m.walBytes.Add(float64(len(data)))
	return nil
}

func (s *instrumentedStore) Sync() error {
	if err := s.faults.syncErr(); err != nil {
		s.m.walSyncErrors.Inc()
		return fmt.Errorf("wal fsync: injected failure: %w", err)
	}
	start := time.Now()
	err := s.next.Sync()
	s.m.walFsync.Observe(time.Since(start).Seconds())
	if err != nil {
		s.m.walSyncErrors.Inc()
	}
	return err
}
