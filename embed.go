package kvidx

import _ "embed"

// MooncakeTraceGz is testdata/mooncake-synthetic.jsonl.gz: the synthetic request
// trace released with Mooncake (FAST'25, Apache-2.0), gzipped. Read-only.
//
//go:embed testdata/mooncake-synthetic.jsonl.gz
var MooncakeTraceGz []byte
