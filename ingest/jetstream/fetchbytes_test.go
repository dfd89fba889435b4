package jetstream

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/internal/natstest"
	"github.com/kvidx/kvidx/wal"
)

func TestFetchBytes(t *testing.T) {
	for _, tc := range []struct {
		limit      int
		maxPayload int64
		want       int
	}{
		{limit: 64 << 20, maxPayload: 1 << 20, want: 64 << 20},
		{limit: 1 << 10, maxPayload: 1 << 20, want: 1<<20 + 64<<10},
		{limit: 64 << 20, maxPayload: 64 << 20, want: 64<<20 + 64<<10},
	} {
		if got := fetchBytes(tc.limit, tc.maxPayload); got != tc.want {
			t.Errorf("fetchBytes(%d, %d) = %d, want %d", tc.limit, tc.maxPayload, got, tc.want)
		}
	}
}

// batchStore is a posStore that records how many events each append held.
type batchStore struct {
	posStore
	mu      sync.Mutex
	batches []int
}

func (b *batchStore) Append(ctx context.Context, evs []engine.Event, ps []wal.Position) (uint64, []error, error) {
	if len(evs) > 0 {
		b.mu.Lock()
		b.batches = append(b.batches, len(evs))
		b.mu.Unlock()
	}
	return b.posStore.Append(ctx, evs, ps)
}

func (b *batchStore) sizes() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.batches...)
}

// bigStored is a Stored event of worker w with n blocks, its JSON about
// 45 bytes a block.
func bigStored(w, first, n int) []byte {
	var sb strings.Builder
	fmt.Fprintf(&sb, `{"worker_id":%d,"event":{"data":{"stored":{"blocks":[`, w)
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		h := first + i
		fmt.Fprintf(&sb, `{"block_hash":%d,"tokens_hash":%d}`, h, h)
	}
	sb.WriteString(`]}}}}`)
	return []byte(sb.String())
}

// A fetch takes no more than FetchMaxBytes of messages, however many
// BatchMax allows, so that a backlog of large messages is not held in
// memory at once.
func TestFetchMaxBytesBoundsABatch(t *testing.T) {
	url := natstest.Start(t)
	const msgs, blocks = 1200, 50
	payloads := make([][]byte, msgs)
	for i := range payloads {
		payloads[i] = bigStored(1, 1_000_000+i*blocks, blocks)
	}
	size := len(payloads[0])
	last := publishRaw(t, url, testPrefix+".1", payloads...)

	st := &batchStore{}
	limit := 3 << 19 // 1.5 MiB, over the test server's 1 MiB max payload
	src := New(Config{URL: url, Stream: testStream, BatchMax: 100_000, FetchMaxBytes: limit}, st)
	runSource(t, src, last)

	sizes := st.sizes()
	total, most := 0, 0
	for _, n := range sizes {
		total += n
		most = max(most, n)
	}
	if total != msgs {
		t.Fatalf("%d events appended, want %d", total, msgs)
	}
	if bound := limit/size + 1; most > bound {
		t.Fatalf("an append held %d messages of %d bytes: over the %d-byte fetch limit (batches %v)", most, size, limit, sizes)
	}
	if len(sizes) < 2 {
		t.Fatalf("one batch of %d messages (%d bytes): the fetch limit did not apply", total, total*size)
	}
}

// A message larger than FetchMaxBytes is still delivered: the limit is
// raised to the server's max payload, where a fetch with a smaller one
// would come back empty at that message forever.
func TestFetchMaxBytesBelowAMessage(t *testing.T) {
	url := natstest.Start(t)
	payloads := [][]byte{bigStored(1, 1, 100), bigStored(1, 101, 100), bigStored(2, 1, 100)}
	if len(payloads[0]) <= 1<<10 {
		t.Fatalf("test message of %d bytes is not over the limit", len(payloads[0]))
	}
	last := publishRaw(t, url, testPrefix+".1", payloads...)

	st := &batchStore{}
	src := New(Config{URL: url, Stream: testStream, FetchMaxBytes: 1 << 10}, st)
	runSource(t, src, last)
	if n := st.count(); n != len(payloads) {
		t.Fatalf("%d events appended, want %d", n, len(payloads))
	}
}

// A message larger than the fetch's byte limit, even once raised to the
// server's max payload (the message was stored under a larger one), is
// delivered, by a fetch of one message without the limit after a limited
// fetch comes back empty (found by review: the source stalled there, with
// no error and a lag of 0).
func TestFetchMessageOverMaxPayload(t *testing.T) {
	dir := t.TempDir()
	url, stop := natstest.StartWith(t, dir, 1<<20)
	big := bigStored(1, 1, 7000) // over 300 KB
	if len(big) < 256<<10 {
		t.Fatalf("test message of %d bytes", len(big))
	}
	last := publishRaw(t, url, testPrefix+".1", big, bigStored(2, 1, 1), bigStored(3, 1, 1))
	stop()

	url, _ = natstest.StartWith(t, dir, 64<<10)
	st := &batchStore{}
	src := New(Config{URL: url, Stream: testStream, FetchMaxBytes: 1 << 10}, st)
	runSource(t, src, last)
	if n := st.count(); n != 3 {
		t.Fatalf("%d events appended, want 3", n)
	}
}
