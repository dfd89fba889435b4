module github.com/kvidx/kvidx

go 1.26

require (
	github.com/golang/snappy v1.0.0
	github.com/spf13/cobra v1.10.2
	github.com/tidwall/wal v1.2.1
	github.com/zeebo/xxh3 v1.1.0
	golang.org/x/sys v0.30.0
	pgregory.net/rapid v1.3.0
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/klauspost/cpuid/v2 v2.2.10 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	github.com/tidwall/gjson v1.10.2 // indirect
	github.com/tidwall/match v1.1.1 // indirect
	github.com/tidwall/pretty v1.2.0 // indirect
	github.com/tidwall/tinylru v1.1.0 // indirect
)
