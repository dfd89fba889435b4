package jetstream

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// The checks below refuse, before anything connects, flag values that can
// never work: a source retries failed sessions for ever, so a malformed URL
// or an invalid name would otherwise only show as warnings in its log.

// CheckURL checks a NATS server URL as nats.Connect reads it: one or more
// comma-separated URLs, each with a host and, if it names one, a numeric
// port (the scheme defaults to nats://).
func CheckURL(s string) error {
	n := 0
	for u := range strings.SplitSeq(s, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			continue
		}
		n++
		if !strings.Contains(u, "://") {
			u = "nats://" + u
		}
		pu, err := url.Parse(u)
		if err != nil {
			return fmt.Errorf("URL %q: %w", u, err)
		}
		switch pu.Scheme {
		case "nats", "tls", "ws", "wss", "tcp":
		default:
			return fmt.Errorf("URL %q: scheme %q: want nats://, tls://, ws://, wss:// or tcp:// (a NATS server, not its HTTP monitoring port)", u, pu.Scheme)
		}
		if pu.Hostname() == "" {
			return fmt.Errorf("URL %q: no host (want e.g. nats://127.0.0.1:4222)", u)
		}
		if p := pu.Port(); p != "" {
			if v, err := strconv.ParseUint(p, 10, 16); err != nil || v == 0 {
				return fmt.Errorf("URL %q: port %q: want a number from 1 to 65535", u, p)
			}
		}
	}
	if n == 0 {
		return fmt.Errorf("URL %q: no server (want e.g. nats://127.0.0.1:4222)", s)
	}
	return nil
}

// CheckStream checks a JetStream stream name.
func CheckStream(name string) error {
	if name == "" {
		return fmt.Errorf("stream name is empty")
	}
	if strings.ContainsAny(name, ">*. /\\\t\r\n") {
		return fmt.Errorf("stream name %q: must not contain '.', '*', '>', '/', '\\' or white space", name)
	}
	return nil
}

// CheckSubject checks a subject filter: dot-separated non-empty tokens
// without white space, where '*' matches one token and '>', last, the rest.
func CheckSubject(subject string) error {
	return checkSubject(subject, true)
}

// CheckSubjectPrefix checks a literal subject prefix (no wildcards).
func CheckSubjectPrefix(prefix string) error {
	return checkSubject(prefix, false)
}

func checkSubject(subject string, wildcards bool) error {
	if subject == "" {
		return fmt.Errorf("subject is empty")
	}
	toks := strings.Split(subject, ".")
	for i, t := range toks {
		switch {
		case t == "":
			return fmt.Errorf("subject %q: empty token (want e.g. kv.events.>)", subject)
		case strings.ContainsAny(t, " \t\r\n"):
			return fmt.Errorf("subject %q: white space", subject)
		case !wildcards && strings.ContainsAny(t, "*>"):
			return fmt.Errorf("subject %q: wildcards ('*', '>') are not allowed here", subject)
		case t == ">" && i != len(toks)-1:
			return fmt.Errorf("subject %q: '>' must be the last token", subject)
		case t != "*" && t != ">" && strings.ContainsAny(t, "*>"):
			return fmt.Errorf("subject %q: a wildcard must be a whole token", subject)
		}
	}
	return nil
}
