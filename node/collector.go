package node

import (
	"github.com/prometheus/client_golang/prometheus"
)

// indexCollector exposes the engine's own counters and sizes, read from
// ix.Stats() at scrape time, and the WAL's counters from the store: the
// engine counts once, the registry only reports.
type indexCollector struct{ m *Metrics }

var (
	descEventsApplied = prometheus.NewDesc("kvidx_events_applied_total",
		"Events applied to the index, by kind.", []string{"kind"}, nil)
	descRejections = prometheus.NewDesc("kvidx_event_rejections_total",
		"Events the index rejected (changing nothing), by reason.", []string{"reason"}, nil)
	descBlocksStored = prometheus.NewDesc("kvidx_blocks_stored_total",
		"Blocks stored by applied Stored events.", nil, nil)
	descBlocksRemoved = prometheus.NewDesc("kvidx_blocks_removed_total",
		"Blocks removed by Removed, Cleared and WorkerRemoved events.", nil, nil)
	descDuplicateStores = prometheus.NewDesc("kvidx_block_duplicate_stores_total",
		"Blocks a Stored event named that their worker key already held.", nil, nil)
	descNotFound = prometheus.NewDesc("kvidx_block_removals_not_found_total",
		"Block hashes a Removed event named that their worker key did not hold.", nil, nil)
	descEntries = prometheus.NewDesc("kvidx_index_entries",
		"(position, local hash) entries in the index.", nil, nil)
	descHolderBlocks = prometheus.NewDesc("kvidx_holder_blocks",
		"Blocks held, summed over worker keys.", nil, nil)
	descWorkerKeys = prometheus.NewDesc("kvidx_worker_keys",
		"Worker keys (worker id, DP rank) holding at least one block.", nil, nil)
	descReservedBlocks = prometheus.NewDesc("kvidx_index_reserved_holder_blocks",
		"Holder-blocks the index was sized for at start (serve --reserve-blocks); 0 when it grows as needed.", nil, nil)
	descReservedKeys = prometheus.NewDesc("kvidx_index_reserved_worker_keys",
		"Worker keys the index was sized for at start (serve --reserve-workers).", nil, nil)
	descTorn = prometheus.NewDesc("kvidx_wal_torn_bytes_dropped_total",
		"Bytes cut off a torn WAL tail when the log was opened.", nil, nil)
	descFenced = prometheus.NewDesc("kvidx_wal_fenced",
		"1 when a WAL write or fsync failed and ingest is refused until restart.", nil, nil)
	descPaused = prometheus.NewDesc("kvidx_ingest_paused_low_space",
		"1 while appends are refused because the WAL's filesystem has less free space than kvidx_disk_floor_bytes.", nil, nil)
	descDiskFree = prometheus.NewDesc("kvidx_disk_free_bytes",
		"Free bytes of the WAL's filesystem, as last read (at most every 250 ms, by an append).", nil, nil)
	descDiskFloor = prometheus.NewDesc("kvidx_disk_floor_bytes",
		"Free bytes kept for the next snapshot and the WAL's next entries: appends pause below it.", nil, nil)
)

func (c *indexCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descEventsApplied, descRejections, descBlocksStored, descBlocksRemoved,
		descDuplicateStores, descNotFound, descEntries, descHolderBlocks, descWorkerKeys, descReservedBlocks,
		descReservedKeys, descTorn, descFenced, descPaused, descDiskFree, descDiskFloor} {
		ch <- d
	}
}

func (c *indexCollector) Collect(ch chan<- prometheus.Metric) {
	box := c.m.store.Load()
	if box == nil {
		return
	}
	st := box.s.Index().Stats()
	k := st.Counters
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	counter(descEventsApplied, k.EventsStored, "stored")
	counter(descEventsApplied, k.EventsRemoved, "removed")
	counter(descEventsApplied, k.EventsCleared, "cleared")
	counter(descEventsApplied, k.EventsWorkerRemoved, "worker_removed")
	counter(descRejections, k.ParentNotFound, "parent_not_found")
	counter(descRejections, k.InvalidSequence, "invalid_sequence")
	counter(descRejections, k.InvalidEvent, "invalid_event")
	counter(descRejections, k.TooManyWorkers, "too_many_workers")
	counter(descBlocksStored, k.BlocksStored)
	counter(descBlocksRemoved, k.BlocksRemoved)
	counter(descDuplicateStores, k.DuplicateStore)
	counter(descNotFound, k.BlockNotFound)
	gauge(descEntries, float64(st.Entries))
	gauge(descHolderBlocks, float64(st.HolderBlocks))
	gauge(descWorkerKeys, float64(st.WorkerKeys))
	rb, rk := box.s.Index().Reserved()
	gauge(descReservedBlocks, float64(rb))
	gauge(descReservedKeys, float64(rk))
	ws := box.s.WALStats()
	counter(descTorn, uint64(max(ws.TornBytesDropped, 0)))
	fenced := 0.0
	if ws.Fenced {
		fenced = 1
	}
	gauge(descFenced, fenced)
	if g, ok := box.s.(spaceGuard); ok {
		paused := 0.0
		if g.LowSpace() {
			paused = 1
		}
		gauge(descPaused, paused)
		if free, floor, checked := g.FreeSpace(); checked {
			gauge(descDiskFree, float64(free))
			gauge(descDiskFloor, float64(floor))
		}
	}
}
