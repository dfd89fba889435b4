// Command kvidx is the KV-cache prefix index for LLM routers: replay event logs,
// benchmark the engine, serve an index, and inspect and recover data directories.
package main
