package snapshot

import "syscall"

// populate maps a snapshot's pages in when Load opens it: one pass in the
// kernel over pages the page cache mostly holds already (the file was just
// written, or is read in file order ahead), instead of a fault per 4 KiB
// page in the decoder, which reads every page once. Scans that read a few
// chunks of a large file do without it.
const populate = syscall.MAP_POPULATE
