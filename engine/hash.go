package engine

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"
)

// Seed is the xxh3 seed of local block hashes (without a LoRA salt) and of the
// router sequence chain. It matches NVIDIA Dynamo's kv-router.
const Seed = 1337

// LoRASeed returns the seed for local hashes of a request served with LoRA
// adapter name: Seed + xxh3(name, 0), wrapping; Seed when name is empty.
func LoRASeed(name string) uint64 {
	if name == "" {
		return Seed
	}
	return Seed + xxh3.HashStringSeed(name, 0)
}

// LocalHashes hashes token ids into one local hash per full block of blockSize
// tokens (a trailing partial block is dropped): each token as 4 little-endian
// bytes, xxh3 with the seed of [LoRASeed]. It appends to dst and returns it.
// Any blockSize is valid: one of 0 or less, or longer than tokens, gives no
// block (and allocates nothing, however large it is).
func LocalHashes(dst []uint64, tokens []uint32, blockSize int, loraName string) []uint64 {
	if blockSize <= 0 || blockSize > len(tokens) {
		return dst
	}
	seed := LoRASeed(loraName)
	buf := make([]byte, 4*blockSize)
	for start := 0; start+blockSize <= len(tokens); start += blockSize {
		for i, t := range tokens[start : start+blockSize] {
			binary.LittleEndian.PutUint32(buf[4*i:], t)
		}
		dst = append(dst, xxh3.HashSeed(buf, seed))
	}
	return dst
}

// NextSeq chains a router sequence hash: the sequence hash of a block whose
// parent has sequence hash parentSeq and whose local hash is tokensHash.
// The first block of a chain has sequence hash equal to its local hash.
func NextSeq(parentSeq, tokensHash uint64) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], parentSeq)
	binary.LittleEndian.PutUint64(b[8:], tokensHash)
	return xxh3.HashSeed(b[:], Seed)
}

// SeqHashes appends to dst the router sequence hash of every prefix of local.
func SeqHashes(dst []uint64, local []uint64) []uint64 {
	for i, h := range local {
		if i > 0 {
			h = NextSeq(dst[len(dst)-1], h)
		}
		dst = append(dst, h)
	}
	return dst
}
