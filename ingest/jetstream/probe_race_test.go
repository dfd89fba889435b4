package jetstream

import (
	"context"
	"errors"
	"testing"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/kvidx/kvidx/internal/natstest"
)

// The idle tail check takes a message found by GetMsg at prev+1, while the
// consumer has nothing pending, for one on a subject the stream no longer
// lists, and narrows the session's filter for good. But the server counts
// a new message into a consumer's pending asynchronously (stream.go:
// signalConsumersLoop): a message of the replica's own subject, published
// just before the look, shows in the stream info and in GetMsg while the
// consumer still says nothing pending. This replays the source's idle
// sequence (empty fetch, stream info, consumer info) and calls the source's
// probe (stillThere) in that state: it must neither narrow the covering
// filter on its own subject's message (no more gaps would be reported this
// session) nor take the message for removed.
func TestProbeFindsOwnSubjectMessage(t *testing.T) {
	url := natstest.Start(t)
	publishCleared(t, url, 1)
	jsc, pub := jetStream(t, url), jetStream(t, url)
	ctx := context.Background()
	stream, err := jsc.Stream(ctx, testStream)
	if err != nil {
		t.Fatal(err)
	}
	filter := testPrefix + ".>" // covers the stream's subjects
	cons, err := stream.OrderedConsumer(ctx, js.OrderedConsumerConfig{FilterSubjects: []string{filter}, DeliverPolicy: js.DeliverByStartSequencePolicy, OptStartSeq: 1, MaxResetAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	src := New(Config{URL: url, Stream: testStream, Subject: filter}, &posStore{})
	var prev uint64
	hits, timeouts := 0, 0
	for i := 0; i < 3000; i++ {
		for _, n := range []int{1000, 1} { // the second fetch is the empty one
			b, err := cons.FetchNoWait(n)
			if errors.Is(err, context.DeadlineExceeded) && timeouts < 100 {
				// A fetch request timed out on a loaded machine (CI's
				// -race run beside other work): not what is tested here.
				timeouts++
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			for m := range b.Messages() {
				md, _ := m.Metadata()
				prev = md.Sequence.Stream
			}
		}
		if _, err := pub.PublishAsync(testPrefix+".1", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		now, err := stream.Info(ctx)
		if err != nil || now.State.LastSeq <= prev {
			continue
		}
		ci, err := cons.Info(ctx)
		if err != nil || ci.NumPending != 0 || ci.Delivered.Stream > prev {
			continue
		}
		// The source's probe, as its idle check calls it in this state.
		var narrowedBy *js.RawStreamMsg
		there := src.stillThere(ctx, stream, prev+1, func(_ []string, found *js.RawStreamMsg) { narrowedBy = found }, now)
		if narrowedBy != nil && subjectCovers(filter, narrowedBy.Subject) {
			t.Fatalf("look %d: message %d on %s, the filter's own subject, about to be delivered (the consumer's pending count not updated yet): the probe narrows the covering filter %s for the session (there=%v)", i, prev+1, narrowedBy.Subject, filter, there)
		}
		if !there {
			t.Fatalf("look %d: message %d is in the stream, yet the probe says removed", i, prev+1)
		}
		hits++
	}
	t.Logf("%d looks in the window, %d fetches timed out", hits, timeouts)
}

// The idle check's probe, when message prev+1 is gone but a later one is
// in the stream (stored just before the look, and not yet counted in the
// consumer's pending): messages prev+1..LastSeq are not all gone, and the
// check must not record them so (with --nats-allow-gap it recorded LastSeq
// as the position, past a message about to be delivered).
func TestIdleProbeSeesLaterMessage(t *testing.T) {
	url := natstest.Start(t)
	publishCleared(t, url, 3)
	stream := testStreamOf(t, url)
	deleteMsgs(t, stream, 2, 2)
	ctx := context.Background()
	now, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	src := New(Config{URL: url, Stream: testStream}, &posStore{})
	noNarrow := func(_ []string, m *js.RawStreamMsg) { t.Fatalf("narrowed by message %d on %s", m.Sequence, m.Subject) }
	if !src.anyFrom(ctx, stream, 2, noNarrow, now) {
		t.Fatal("message 2 gone and message 3 in the stream: the probe says messages 2..3 are gone")
	}
	deleteMsgs(t, stream, 3, 3)
	if src.anyFrom(ctx, stream, 2, noNarrow, now) {
		t.Fatal("messages 2..3 gone: the probe says one is there")
	}
}
