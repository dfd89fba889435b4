package engine

import (
	"errors"
	"fmt"
)

// WorkerKey names one KV cache: a worker and, under data parallelism, one of its
// ranks. DPRank 0 means "no data parallelism".
type WorkerKey struct {
	WorkerID uint64
	DPRank   uint32
}

func (k WorkerKey) String() string { return fmt.Sprintf("%d/%d", k.WorkerID, k.DPRank) }

// EventKind tells which fields of an [Event] are used.
type EventKind uint8

// The event kinds, in the order of their wire codes (the WAL depends on these values).
const (
	KindStored EventKind = iota + 1
	KindRemoved
	KindCleared
	KindWorkerRemoved
)

func (k EventKind) String() string {
	switch k {
	case KindStored:
		return "stored"
	case KindRemoved:
		return "removed"
	case KindCleared:
		return "cleared"
	case KindWorkerRemoved:
		return "worker_removed"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Block is one stored KV block. TokensHash is the local hash of the block's
// tokens alone (see [LocalHashes]); BlockHash is the engine's own name for the
// block, any 64-bit value, never assumed to follow kvidx's hash chain.
type Block struct {
	BlockHash  uint64
	TokensHash uint64
}

// Event is one KV-cache event of one worker key.
//
// Stored uses ParentHash (when HasParent), StartPosition (when HasStartPosition)
// and Blocks. Removed uses BlockHashes. Cleared removes every block of Worker.
// WorkerRemoved removes every block of every DP rank of Worker.WorkerID.
// EventID is informational only: it never changes how an event applies.
type Event struct {
	Worker           WorkerKey
	EventID          uint64
	Kind             EventKind
	HasParent        bool
	ParentHash       uint64
	HasStartPosition bool
	StartPosition    uint64
	Blocks           []Block
	BlockHashes      []uint64
}

// Rejections: an event that fails with one of these changed nothing.
var (
	// ErrParentNotFound: a Stored event names a parent block its worker key does not hold.
	ErrParentNotFound = errors.New("parent_not_found")
	// ErrInvalidSequence: a Stored event cannot be placed (its parent is one of its own
	// blocks, it has no blocks, or its positions overflow).
	ErrInvalidSequence = errors.New("invalid_sequence")
	// ErrInvalidEvent: the event's kind is unknown.
	ErrInvalidEvent = errors.New("invalid_event")
	// ErrTooManyWorkers: a Stored event names a new worker key while the index
	// already holds blocks of MaxWorkerKeys worker keys.
	ErrTooManyWorkers = errors.New("too_many_workers")
)

// RejectReason returns the counter name of a rejection returned by [Index.Apply]
// ("parent_not_found", "invalid_sequence", "invalid_event", "too_many_workers"),
// or "" if err is not a rejection.
func RejectReason(err error) string {
	for _, e := range []error{ErrParentNotFound, ErrInvalidSequence, ErrInvalidEvent, ErrTooManyWorkers} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return ""
}

// MaxPosition is the largest block position the index stores. Positions are
// kept in 32 bits; a Stored event reaching past this is rejected as invalid_sequence.
const MaxPosition = 1<<32 - 2
