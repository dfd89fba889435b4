package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/eventjson"
	"github.com/kvidx/kvidx/workload"
)

// EnsureStream creates the stream with subjects if it does not exist.
func EnsureStream(ctx context.Context, jsc js.JetStream, stream string, subjects ...string) (js.Stream, error) {
	st, err := jsc.Stream(ctx, stream)
	if err == nil {
		return st, nil
	}
	if !errors.Is(err, js.ErrStreamNotFound) {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	st, err = jsc.CreateStream(ctx, js.StreamConfig{Name: stream, Subjects: subjects, Storage: js.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("creating stream %s: %w", stream, err)
	}
	return st, nil
}

// PublishReport says what Publish sent.
type PublishReport struct {
	Messages, Events, BlockOps int
	LastSeq                    uint64
}

// Publish feeds the stream from the Mooncake workload: one message per
// request, holding the events its worker emitted as NDJSON, on subject
// "<subjectPrefix>.<worker id>". It creates the stream (subjects
// "<subjectPrefix>.>") if missing. progress, if not nil, receives the
// requests generated of the workload's total at most every
// publishProgressEvery, and once at the end.
func Publish(ctx context.Context, url, stream, subjectPrefix string, tr *workload.Trace, cfg workload.Config, progress workload.ProgressFunc) (PublishReport, error) {
	var rep PublishReport
	nc, err := nats.Connect(url, nats.Name("kvidx publish"))
	if err != nil {
		return rep, fmt.Errorf("connecting to %s: %w", url, err)
	}
	defer nc.Close()
	jsc, err := js.New(nc)
	if err != nil {
		return rep, err
	}
	st, err := EnsureStream(ctx, jsc, stream, subjectPrefix+".>")
	if err != nil {
		return rep, err
	}
	// An existing stream bound to other subjects does not take these
	// messages: the publish would fail with "no response from stream".
	// The subjects are "<prefix>.<worker id>", one token after the prefix:
	// a stream of "<prefix>.*" takes them as well as one of "<prefix>.>".
	if subs := st.CachedInfo().Config.Subjects; len(subs) > 0 && !anyCovers(subs, subjectPrefix+".*") {
		return rep, fmt.Errorf("stream %s takes subjects %s, not %s.<worker id>: publish with a --subject-prefix those subjects cover, or to another stream",
			stream, strings.Join(subs, ", "), subjectPrefix)
	}
	var buf []byte
	start, lastProgress := time.Now(), time.Now()
	total, done := workload.NumRequests(tr, cfg.Duplicate), 0
	err = workload.Generate(ctx, tr, cfg, func(req workload.Request, events []engine.Event) error {
		done++
		if progress != nil && done&63 == 0 {
			if now := time.Now(); now.Sub(lastProgress) >= publishProgressEvery {
				lastProgress = now
				progress(done, total, now.Sub(start))
			}
		}
		if len(events) == 0 {
			return nil
		}
		buf = buf[:0]
		for i := range events {
			buf = eventjson.AppendEvent(buf, &events[i])
			buf = append(buf, '\n')
		}
		ack, err := jsc.Publish(ctx, subjectPrefix+"."+strconv.FormatUint(req.Worker.WorkerID, 10), buf)
		if err != nil {
			return fmt.Errorf("publishing request %d: %w", req.Seq, err)
		}
		rep.Messages++
		rep.Events += len(events)
		rep.BlockOps += workload.BlockOps(events)
		rep.LastSeq = ack.Sequence
		return nil
	})
	if progress != nil && err == nil {
		progress(done, total, time.Since(start))
	}
	return rep, err
}

// publishProgressEvery is how often Publish reports its progress.
const publishProgressEvery = time.Second
