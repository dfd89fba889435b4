package eventjson

import (
	"errors"
	"math"

	"github.com/kvidx/kvidx/engine"
)

// Query is one prefix query: which worker keys hold the longest prefix of
// LocalHashes.
//
// On the wire it names the prefix either by local block hashes or by token
// ids, which the decoder hashes with [engine.LocalHashes]:
//
//	{"local_hashes":[11,12,13]}
//	{"tokens":[1,2,3,4,5,6,7,8],"block_size":4,"lora_name":"sql-adapter"}
//
// and may restrict the answer to some worker keys ("dp_rank" defaults to 0):
//
//	{"local_hashes":[11,12],"candidates":[{"worker_id":7},{"worker_id":8,"dp_rank":1}]}
type Query struct {
	// LocalHashes are the query's local block hashes; possibly empty.
	LocalHashes []uint64
	// Candidates restricts scoring: nil scores every worker key, a non-nil
	// empty slice scores none.
	Candidates []engine.WorkerKey
}

// DecodeQuery decodes one query (a JSON object, optionally surrounded by
// whitespace). Unknown fields are ignored and null reads as absent. Exactly
// one of "local_hashes" and "tokens" is required; "tokens" needs "block_size"
// >= 1 and may have "lora_name", and those two are refused without "tokens"
// (with local hashes they would be silently meaningless). Token ids must fit
// 32 bits. A trailing partial block of tokens is not part of the query.
func DecodeQuery(data []byte) (Query, error) {
	return DecodeQueryDefault(data, 0)
}

// DecodeQueryDefault is [DecodeQuery] where a token query without
// "block_size" (or with null) takes defaultBlockSize, when that is at least
// 1: a server's default block size.
func DecodeQueryDefault(data []byte, defaultBlockSize int) (Query, error) {
	s := scanner{data: data}
	q, err := decodeQuery(&s, defaultBlockSize)
	if err == nil {
		err = s.end()
	}
	if err != nil {
		return Query{}, err
	}
	return q, nil
}

// Query fields, as bits of a "seen" set to refuse duplicates.
const (
	qLocal = 1 << iota
	qTokens
	qBlockSize
	qLora
	qCandidates
)

func decodeQuery(s *scanner, defaultBlockSize int) (Query, error) {
	var (
		q         Query
		tokens    []uint64
		blockSize uint64
		lora      string
		seen      uint8 // fields present, duplicates included
		have      uint8 // fields present and not null
	)
	if err := s.beginObject(); err != nil {
		return q, err
	}
	for first := true; ; {
		key, more, err := s.member(&first)
		if err != nil {
			return q, err
		}
		if !more {
			break
		}
		var bit uint8
		switch string(key) {
		case "local_hashes":
			bit = qLocal
		case "tokens":
			bit = qTokens
		case "block_size":
			bit = qBlockSize
		case "lora_name":
			bit = qLora
		case "candidates":
			bit = qCandidates
		default:
			if err := s.skipUnknown(key); err != nil {
				return q, err
			}
			continue
		}
		k := string(key)
		if seen&bit != 0 {
			return q, inField(k, errDuplicate)
		}
		seen |= bit
		// Every query field is optional: null is absence.
		if isNull, err := s.null(); err != nil || isNull {
			if err != nil {
				return q, inField(k, err)
			}
			continue
		}
		have |= bit
		switch bit {
		case qLocal:
			q.LocalHashes, err = appendUints(s, []uint64{}, math.MaxUint64)
		case qTokens:
			tokens, err = appendUints(s, nil, math.MaxUint32)
		case qBlockSize:
			blockSize, err = s.uint(math.MaxUint64)
		case qLora:
			var name []byte
			name, err = s.str()
			lora = string(name)
		case qCandidates:
			q.Candidates, err = decodeCandidates(s)
		}
		if err != nil {
			return q, inField(k, err)
		}
	}
	if have&qTokens != 0 && have&qBlockSize == 0 && defaultBlockSize >= 1 {
		have |= qBlockSize
		blockSize = uint64(defaultBlockSize)
	}
	switch {
	case have&qLocal != 0 && have&qTokens != 0:
		return q, errors.New(`both "local_hashes" and "tokens" given, want one`)
	case have&(qLocal|qTokens) == 0:
		return q, errors.New(`one of "local_hashes" or "tokens" is required`)
	case have&qLocal != 0 && have&(qBlockSize|qLora) != 0:
		return q, errors.New(`"block_size" and "lora_name" apply only to "tokens"`)
	case have&qTokens != 0 && have&qBlockSize == 0:
		return q, inField("block_size", errors.New("required with tokens"))
	case have&qTokens != 0 && blockSize == 0:
		return q, inField("block_size", errors.New("must be at least 1"))
	}
	if have&qTokens != 0 {
		q.LocalHashes = []uint64{}
		// A block larger than the query hashes nothing; checking first also
		// keeps LocalHashes from allocating a buffer of a hostile block_size.
		if blockSize <= uint64(len(tokens)) {
			ts := make([]uint32, len(tokens))
			for i, t := range tokens {
				ts[i] = uint32(t)
			}
			q.LocalHashes = engine.LocalHashes(make([]uint64, 0, len(ts)/int(blockSize)), ts, int(blockSize), lora)
		}
	}
	return q, nil
}

// decodeCandidates reads a candidates array, returning a non-nil slice even
// when it is empty: "candidates":[] means "score nobody", not "everybody".
func decodeCandidates(s *scanner) ([]engine.WorkerKey, error) {
	if err := s.beginArray(); err != nil {
		return nil, err
	}
	ws := []engine.WorkerKey{}
	for first, i := true, 0; ; i++ {
		more, err := s.element(&first)
		if err != nil {
			return nil, err
		}
		if !more {
			return ws, nil
		}
		var w engine.WorkerKey
		if err := decodeCandidate(s, &w); err != nil {
			return nil, inElement(i, err)
		}
		ws = append(ws, w)
	}
}

func decodeCandidate(s *scanner, w *engine.WorkerKey) error {
	if err := s.beginRequiredObject(); err != nil {
		return err
	}
	var haveWorker, haveRank bool
	for first := true; ; {
		key, more, err := s.member(&first)
		if err != nil {
			return err
		}
		if !more {
			break
		}
		switch string(key) {
		case "worker_id":
			if err := firstTime(&haveWorker, "worker_id"); err != nil {
				return err
			}
			if w.WorkerID, err = s.uint(math.MaxUint64); err != nil {
				return inField("worker_id", err)
			}
		case "dp_rank":
			if err := firstTime(&haveRank, "dp_rank"); err != nil {
				return err
			}
			r, err := optUint(s, math.MaxUint32)
			if err != nil {
				return inField("dp_rank", err)
			}
			w.DPRank = uint32(r)
		default:
			if err := s.skipUnknown(key); err != nil {
				return err
			}
		}
	}
	if !haveWorker {
		return inField("worker_id", errMissing)
	}
	return nil
}

// Match answers q on ix. It handles the cases whose answer is known without
// looking at the index (an empty query, an empty candidate list) itself, so
// that they do not depend on how the engine treats empty inputs.
func (q *Query) Match(ix *engine.Index) []engine.Score {
	if len(q.LocalHashes) == 0 || (q.Candidates != nil && len(q.Candidates) == 0) {
		return []engine.Score{}
	}
	return ix.Match(q.LocalHashes, q.Candidates)
}
