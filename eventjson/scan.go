package eventjson

import (
	"errors"
	"fmt"
	"math"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth bounds the nesting of skipped unknown values, so that a hostile
// line of a million '[' costs an error, not a deep recursion.
const maxDepth = 512

// scanner is a cursor over one JSON text. Its methods skip leading whitespace
// themselves, so callers never have to.
type scanner struct {
	data []byte
	pos  int
	// scratch holds unescaped keys and strings; reused to keep decoding allocation-free.
	scratch []byte
}

// syntaxError reports malformed JSON. The offset is from the start of the text
// given to the decoder (the line, for NDJSON).
func (s *scanner) syntaxError(format string, args ...any) error {
	return fmt.Errorf("invalid JSON at offset %d: %s", s.pos, fmt.Sprintf(format, args...))
}

// unexpected describes the byte at the cursor for a syntax error.
func (s *scanner) unexpected(want string) error {
	if s.pos >= len(s.data) {
		return s.syntaxError("unexpected end of input, want %s", want)
	}
	b := s.data[s.pos]
	switch {
	case string(s.data[s.pos:min(s.pos+len(utf8BOM), len(s.data))]) == utf8BOM:
		return s.syntaxError("unexpected byte order mark (EF BB BF), want %s", want)
	case b >= utf8.RuneSelf:
		// %q of a byte quotes the rune of that number: 0xEF read as 'ï'.
		return s.syntaxError("unexpected byte 0x%02X, want %s", b, want)
	}
	return s.syntaxError("unexpected %q, want %s", b, want)
}

const utf8BOM = "\xEF\xBB\xBF"

func (s *scanner) skipSpace() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, or 0 at the end of input.
func (s *scanner) peek() byte {
	s.skipSpace()
	if s.pos >= len(s.data) {
		return 0
	}
	return s.data[s.pos]
}

// atEnd reports whether only whitespace is left. (peek's 0 is ambiguous: the
// input may hold a NUL byte.)
func (s *scanner) atEnd() bool {
	s.skipSpace()
	return s.pos >= len(s.data)
}

// end checks that nothing but whitespace is left.
func (s *scanner) end() error {
	if !s.atEnd() {
		return s.syntaxError("trailing data %q after the value", clip(s.data[s.pos:]))
	}
	return nil
}

func (s *scanner) consume(c byte) error {
	if s.peek() != c {
		return s.unexpected(fmt.Sprintf("%q", c))
	}
	s.pos++
	return nil
}

// null consumes a null literal if one is next.
func (s *scanner) null() (bool, error) {
	if s.peek() != 'n' {
		return false, nil
	}
	return true, s.literal("null")
}

func (s *scanner) literal(lit string) error {
	if !s.hasLiteral(lit) {
		return s.syntaxError("invalid literal, want %s", lit)
	}
	s.pos += len(lit)
	return nil
}

// kind names the JSON type of the next value, for type errors.
func (s *scanner) kind() string {
	if s.atEnd() {
		return "end of input"
	}
	switch s.data[s.pos] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return "a number"
	}
	return fmt.Sprintf("invalid character %q", s.data[s.pos])
}

// beginObject consumes '{'. Callers then loop on member.
func (s *scanner) beginObject() error {
	if s.peek() != '{' {
		return s.mismatch("an object")
	}
	s.pos++
	return nil
}

// mismatch reports that the next value is not of the wanted type: as a type
// error when it is a well-formed start of some other value, as a syntax error
// otherwise.
func (s *scanner) mismatch(want string) error {
	switch c := s.peek(); {
	case c == '"' || c == '{' || c == '[' || c == '-' || isDigit(c),
		c == 'n' && s.hasLiteral("null"),
		c == 't' && s.hasLiteral("true"),
		c == 'f' && s.hasLiteral("false"):
		return fmt.Errorf("expected %s, found %s", want, s.kind())
	}
	return s.unexpected(want)
}

func (s *scanner) hasLiteral(lit string) bool {
	return len(s.data)-s.pos >= len(lit) && string(s.data[s.pos:s.pos+len(lit)]) == lit
}

// member reads the next key of an object up to and including its ':'. It
// returns more=false after consuming the closing '}'. first must point to a
// variable that is true before the first call. The key aliases the input or
// the scanner's scratch buffer: it is valid until the next string is read.
func (s *scanner) member(first *bool) (key []byte, more bool, err error) {
	if more, err = s.memberStart(first); err != nil || !more {
		return nil, false, err
	}
	if key, err = s.str(); err != nil {
		return nil, false, err
	}
	if err = s.consume(':'); err != nil {
		return nil, false, err
	}
	return key, true, nil
}

// memberStart moves past the ',' before the next key, or past the closing '}'
// (more=false), leaving the cursor on the key's opening quote.
func (s *scanner) memberStart(first *bool) (more bool, err error) {
	c := s.peek()
	if c == '}' {
		s.pos++
		return false, nil
	}
	if !*first {
		if c != ',' {
			return false, s.unexpected("',' or '}'")
		}
		s.pos++
		c = s.peek()
	}
	*first = false
	if c != '"' {
		return false, s.unexpected("a string key")
	}
	return true, nil
}

// beginArray consumes '['. Callers then loop on element.
func (s *scanner) beginArray() error {
	if s.peek() != '[' {
		return s.mismatch("an array")
	}
	s.pos++
	return nil
}

// beginRequiredObject is beginObject for a field that must not be null: a
// null is errNull ("must not be null"), not a type mismatch.
func (s *scanner) beginRequiredObject() error { return s.beginRequired('{', "an object") }

// beginRequiredArray is beginArray for a field that must not be null.
func (s *scanner) beginRequiredArray() error { return s.beginRequired('[', "an array") }

// beginRequired consumes open, or refuses a null as errNull and anything
// else as not what.
func (s *scanner) beginRequired(open byte, what string) error {
	if s.peek() == open {
		s.pos++
		return nil
	}
	if isNull, err := s.null(); err != nil || isNull {
		return cmpErr(err, errNull)
	}
	return s.mismatch(what)
}

// element positions the cursor on the next array element, returning false
// after consuming the closing ']'.
func (s *scanner) element(first *bool) (bool, error) {
	c := s.peek()
	if c == ']' {
		s.pos++
		return false, nil
	}
	if !*first {
		if c != ',' {
			return false, s.unexpected("',' or ']'")
		}
		s.pos++
		if s.peek() == ']' {
			return false, s.unexpected("a value after ','")
		}
	}
	*first = false
	return true, nil
}

// str reads a string value and returns its unescaped bytes, aliasing the input
// when the string has no escapes (the common case) and the scratch buffer
// otherwise. Invalid UTF-8 is passed through unchanged, as encoding/json's
// validator accepts it.
func (s *scanner) str() ([]byte, error) {
	if s.peek() != '"' {
		return nil, s.mismatch("a string")
	}
	s.pos++
	start := s.pos
	for s.pos < len(s.data) {
		switch c := s.data[s.pos]; {
		case c == '"':
			s.pos++
			return s.data[start : s.pos-1], nil
		case c == '\\':
			s.scratch = append(s.scratch[:0], s.data[start:s.pos]...)
			return s.strEscaped()
		case c < 0x20:
			return nil, s.syntaxError("control character %q in string", c)
		default:
			s.pos++
		}
	}
	return nil, s.syntaxError("unterminated string")
}

// strEscaped continues str from the first backslash, unescaping into scratch.
func (s *scanner) strEscaped() ([]byte, error) {
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '"':
			s.pos++
			return s.scratch, nil
		case c < 0x20:
			return nil, s.syntaxError("control character %q in string", c)
		case c != '\\':
			s.scratch = append(s.scratch, c)
			s.pos++
			continue
		}
		if s.pos+1 >= len(s.data) {
			return nil, s.syntaxError("unterminated string")
		}
		e := s.data[s.pos+1]
		s.pos += 2
		switch e {
		case '"', '\\', '/':
			s.scratch = append(s.scratch, e)
		case 'b':
			s.scratch = append(s.scratch, '\b')
		case 'f':
			s.scratch = append(s.scratch, '\f')
		case 'n':
			s.scratch = append(s.scratch, '\n')
		case 'r':
			s.scratch = append(s.scratch, '\r')
		case 't':
			s.scratch = append(s.scratch, '\t')
		case 'u':
			r, err := s.hex4()
			if err != nil {
				return nil, err
			}
			if utf16.IsSurrogate(r) {
				// A high surrogate followed by \uDC00..\uDFFF is one code point;
				// anything else becomes U+FFFD, as in encoding/json.
				r2 := utf8.RuneError
				if s.pos+1 < len(s.data) && s.data[s.pos] == '\\' && s.data[s.pos+1] == 'u' {
					save := s.pos
					s.pos += 2
					lo, err := s.hex4()
					if err != nil {
						return nil, err
					}
					if d := utf16.DecodeRune(r, lo); d != utf8.RuneError {
						r2 = d
					} else {
						s.pos = save
					}
				}
				r = r2
			}
			s.scratch = utf8.AppendRune(s.scratch, r)
		default:
			s.pos--
			return nil, s.syntaxError("invalid escape '\\%c' in string", e)
		}
	}
	return nil, s.syntaxError("unterminated string")
}

// skipStr validates and skips the string at the cursor without unescaping it:
// skipped values must not clobber the scratch buffer, which may hold the key
// of the member being skipped.
func (s *scanner) skipStr() error {
	s.pos++ // the opening quote, checked by the caller
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '"':
			s.pos++
			return nil
		case c < 0x20:
			return s.syntaxError("control character %q in string", c)
		case c != '\\':
			s.pos++
			continue
		}
		if s.pos+1 >= len(s.data) {
			return s.syntaxError("unterminated string")
		}
		e := s.data[s.pos+1]
		s.pos += 2
		switch e {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		case 'u':
			if _, err := s.hex4(); err != nil {
				return err
			}
		default:
			s.pos--
			return s.syntaxError("invalid escape '\\%c' in string", e)
		}
	}
	return s.syntaxError("unterminated string")
}

func (s *scanner) hex4() (rune, error) {
	if len(s.data)-s.pos < 4 {
		return 0, s.syntaxError("truncated \\u escape")
	}
	var r rune
	for _, c := range s.data[s.pos : s.pos+4] {
		switch {
		case isDigit(c):
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, s.syntaxError("invalid \\u escape")
		}
		r = r<<4 | rune(c)
	}
	s.pos += 4
	return r, nil
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// errNull is returned for a null where a value is required.
var errNull = errors.New("must not be null")

// uint reads an unsigned integer no larger than max. JSON allows other number
// forms, but every number in the format is a hash, an id or a count, and a
// "-1", "1.5" or "1e3" there is a producer bug that must not be rounded into a
// wrong hash, so each is rejected with its own message.
func (s *scanner) uint(max uint64) (uint64, error) {
	c := s.peek()
	if !isDigit(c) && c != '-' {
		if c == 'n' && s.hasLiteral("null") {
			s.pos += len("null")
			return 0, errNull
		}
		return 0, s.mismatch("an unsigned integer")
	}
	start := s.pos
	// Fast path: plain digits, accumulated as they are scanned.
	var v uint64
	overflow := false
	if c != '-' {
		if c == '0' && s.pos+1 < len(s.data) && isDigit(s.data[s.pos+1]) {
			s.pos++
			return 0, s.syntaxError("leading zero in number")
		}
		for s.pos < len(s.data) && isDigit(s.data[s.pos]) {
			d := uint64(s.data[s.pos] - '0')
			if v > (math.MaxUint64-d)/10 {
				overflow = true
			}
			v = v*10 + d
			s.pos++
		}
		if s.pos >= len(s.data) || !isNumberByte(s.data[s.pos]) {
			if overflow {
				return 0, fmt.Errorf("number %s overflows 64 bits", clip(s.data[start:s.pos]))
			}
			if v > max {
				return 0, fmt.Errorf("number %d overflows %d bits", v, bitsOf(max))
			}
			return v, nil
		}
	}
	// Slow path: some other JSON number; check its grammar, then say what is wrong.
	s.pos = start
	neg, frac, exp, err := s.number()
	if err != nil {
		return 0, err
	}
	text := clip(s.data[start:s.pos])
	switch {
	case neg:
		return 0, fmt.Errorf("negative number %s, want an unsigned integer", text)
	case frac:
		return 0, fmt.Errorf("fractional number %s, want an unsigned integer", text)
	case exp:
		return 0, fmt.Errorf("number %s in exponent form, want a plain unsigned integer", text)
	}
	return 0, s.syntaxError("malformed number %s", text)
}

func isNumberByte(c byte) bool {
	return isDigit(c) || c == '.' || c == 'e' || c == 'E' || c == '-' || c == '+'
}

func bitsOf(max uint64) int {
	n := 0
	for ; max != 0; max >>= 1 {
		n++
	}
	return n
}

// number scans any JSON number, validating its grammar.
func (s *scanner) number() (neg, frac, exp bool, err error) {
	if s.pos < len(s.data) && s.data[s.pos] == '-' {
		neg = true
		s.pos++
	}
	switch {
	case s.pos < len(s.data) && s.data[s.pos] == '0':
		s.pos++
	case s.pos < len(s.data) && isDigit(s.data[s.pos]):
		s.digits()
	default:
		return false, false, false, s.unexpected("a digit")
	}
	if s.pos < len(s.data) && s.data[s.pos] == '.' {
		frac = true
		s.pos++
		if s.pos >= len(s.data) || !isDigit(s.data[s.pos]) {
			return false, false, false, s.unexpected("a digit after '.'")
		}
		s.digits()
	}
	if s.pos < len(s.data) && (s.data[s.pos] == 'e' || s.data[s.pos] == 'E') {
		exp = true
		s.pos++
		if s.pos < len(s.data) && (s.data[s.pos] == '+' || s.data[s.pos] == '-') {
			s.pos++
		}
		if s.pos >= len(s.data) || !isDigit(s.data[s.pos]) {
			return false, false, false, s.unexpected("a digit in the exponent")
		}
		s.digits()
	}
	if s.pos < len(s.data) && isNumberByte(s.data[s.pos]) {
		return false, false, false, s.unexpected("the end of the number")
	}
	return neg, frac, exp, nil
}

func (s *scanner) digits() {
	for s.pos < len(s.data) && isDigit(s.data[s.pos]) {
		s.pos++
	}
}

// skipUnknown skips the value of an unknown member, whose key the error
// names. The key is rendered only on failure, keeping the fast path free of
// formatting.
func (s *scanner) skipUnknown(key []byte) error {
	if err := s.skip(0); err != nil {
		return inField(keyName(key), err)
	}
	return nil
}

// skip validates and skips one value of any type: unknown fields are ignored,
// but must still be well-formed JSON.
func (s *scanner) skip(depth int) error {
	if depth > maxDepth {
		return s.syntaxError("nesting deeper than %d", maxDepth)
	}
	switch c := s.peek(); {
	case c == '{':
		s.pos++
		for first := true; ; {
			more, err := s.memberStart(&first)
			if err != nil || !more {
				return err
			}
			if err := s.skipStr(); err != nil {
				return err
			}
			if err := s.consume(':'); err != nil {
				return err
			}
			if err := s.skip(depth + 1); err != nil {
				return err
			}
		}
	case c == '[':
		s.pos++
		for first := true; ; {
			more, err := s.element(&first)
			if err != nil || !more {
				return err
			}
			if err := s.skip(depth + 1); err != nil {
				return err
			}
		}
	case c == '"':
		return s.skipStr()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || isDigit(c):
		_, _, _, err := s.number()
		return err
	}
	return s.unexpected("a value")
}

// clip shortens input quoted in error messages, so that a line of megabytes
// does not produce an error of megabytes.
func clip(b []byte) string {
	const max = 32
	if len(b) > max {
		n := max
		for n > 0 && !utf8.RuneStart(b[n]) { // do not cut a character in two
			n--
		}
		return string(b[:n]) + "..."
	}
	return string(b)
}
