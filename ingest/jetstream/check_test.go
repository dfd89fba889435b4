package jetstream

import "testing"

func TestChecks(t *testing.T) {
	for _, u := range []string{"nats://127.0.0.1:4222", "127.0.0.1:4222", "nats://h", "tls://a:1, nats://b:2", "nats://[::1]:4222", "ws://h:8080", "wss://h", "tcp://h:4222"} {
		if err := CheckURL(u); err != nil {
			t.Errorf("CheckURL(%q): %v", u, err)
		}
	}
	for _, u := range []string{"", " ", ",", "nats://h:x", "nats://h:0", "nats://h:70000", "nats://:4222", "nats://a:1,nats://b:y", "http://127.0.0.1:4222", "nats://a:1,https://b:2"} {
		if err := CheckURL(u); err == nil {
			t.Errorf("CheckURL(%q): want an error", u)
		}
	}
	for _, s := range []string{"", "a.b", "a*", "a>", "a b", "a/b"} {
		if err := CheckStream(s); err == nil {
			t.Errorf("CheckStream(%q): want an error", s)
		}
	}
	if err := CheckStream("KV_EVENTS"); err != nil {
		t.Error(err)
	}
	for _, s := range []string{"kv.events.>", "kv.*.x", ">", "kv"} {
		if err := CheckSubject(s); err != nil {
			t.Errorf("CheckSubject(%q): %v", s, err)
		}
	}
	for _, s := range []string{"", ".", "kv.", ".kv", "kv..x", "kv.>.x", "kv.a*", "k v"} {
		if err := CheckSubject(s); err == nil {
			t.Errorf("CheckSubject(%q): want an error", s)
		}
	}
	for _, s := range []string{"kv.*", "kv.>", "", "kv."} {
		if err := CheckSubjectPrefix(s); err == nil {
			t.Errorf("CheckSubjectPrefix(%q): want an error", s)
		}
	}
	if err := CheckSubjectPrefix("kv.events"); err != nil {
		t.Error(err)
	}
}

func TestSubjectsOverlap(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"kv.events.>", "kv.events.>", true},
		{"kv.events.3", "kv.events.>", true},
		{"kv.*.3", "kv.events.>", true},
		{">", "kv.events.>", true},
		{"other.>", "kv.events.>", false},
		{"kv.events", "kv.events.>", false},
		{"kv.events.3.x", "kv.events.*", false},
		{"kv.*", "kv.events", true},
		{"kv.a", "kv.b", false},
	} {
		if got := subjectsOverlap(tc.a, tc.b); got != tc.want {
			t.Errorf("subjectsOverlap(%q, %q) = %v", tc.a, tc.b, got)
		}
		if got := subjectsOverlap(tc.b, tc.a); got != tc.want {
			t.Errorf("subjectsOverlap(%q, %q) = %v", tc.b, tc.a, got)
		}
	}
}
