package kubeplug

import (
	"encoding/json"
	"errors"
	"strconv"
)

// Time is a point in time as Kubernetes writes it: RFC 3339 in UTC, whole
// seconds (`2026-01-02T03:04:05Z`). Reading accepts any RFC 3339 timestamp
// and normalizes it (offset applied, fraction dropped), as the Rust SDK's
// Time and k8s-openapi's do; anything else is refused.
type Time string

// The earliest and latest seconds accepted (those of the Rust SDK).
const (
	minSeconds = -377705023201
	maxSeconds = 253402207200
)

// ParseTime parses an RFC 3339 timestamp into its normalized form.
func ParseTime(text string) (Time, bool) {
	seconds, ok := parseRFC3339(text)
	if !ok {
		return "", false
	}
	return Time(formatUTC(seconds)), true
}

// UnmarshalJSON reads a timestamp, normalized.
func (t *Time) UnmarshalJSON(data []byte) error {
	var text string
	if err := json.Unmarshal(data, &text); err != nil {
		return err
	}
	parsed, ok := ParseTime(text)
	if !ok {
		return errors.New("not an RFC 3339 timestamp")
	}
	*t = parsed
	return nil
}

type cursor struct {
	text string
	at   int
}

func (c *cursor) peek() (byte, bool) {
	if c.at < len(c.text) {
		return c.text[c.at], true
	}
	return 0, false
}

func (c *cursor) eat(b byte) bool {
	if p, ok := c.peek(); ok && p == b {
		c.at++
		return true
	}
	return false
}

func (c *cursor) number(n int) (int64, bool) {
	if c.at+n > len(c.text) {
		return 0, false
	}
	var v int64
	for _, d := range []byte(c.text[c.at : c.at+n]) {
		if d < '0' || d > '9' {
			return 0, false
		}
		v = v*10 + int64(d-'0')
	}
	c.at += n
	return v, true
}

func parseRFC3339(text string) (int64, bool) {
	c := &cursor{text: text}
	year, ok := c.number(4)
	if !ok || !c.eat('-') {
		return 0, false
	}
	month, ok := c.number(2)
	if !ok || !c.eat('-') {
		return 0, false
	}
	day, ok := c.number(2)
	if !ok || month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month) {
		return 0, false
	}
	if !(c.eat('T') || c.eat('t') || c.eat(' ')) {
		return 0, false
	}
	hour, ok := c.number(2)
	if !ok || !c.eat(':') {
		return 0, false
	}
	minute, ok := c.number(2)
	if !ok {
		return 0, false
	}
	var second int64
	if c.eat(':') {
		if second, ok = c.number(2); !ok {
			return 0, false
		}
		if c.eat('.') || c.eat(',') {
			start := c.at
			for p, ok := c.peek(); ok && p >= '0' && p <= '9'; p, ok = c.peek() {
				c.at++
			}
			if n := c.at - start; n < 1 || n > 9 {
				return 0, false
			}
		}
	}
	if hour > 23 || minute > 59 || second > 60 {
		return 0, false
	}
	second = min(second, 59)
	var offset int64
	if !(c.eat('Z') || c.eat('z')) {
		var sign int64
		switch {
		case c.eat('+'):
			sign = 1
		case c.eat('-'):
			sign = -1
		default:
			return 0, false
		}
		hours, ok := c.number(2)
		if !ok {
			return 0, false
		}
		var minutes int64
		if c.eat(':') {
			if minutes, ok = c.number(2); !ok {
				return 0, false
			}
		} else if m, ok := c.number(2); ok {
			minutes = m
		}
		if hours > 25 || minutes > 59 {
			return 0, false
		}
		offset = sign * (hours*3600 + minutes*60)
	}
	if c.at != len(text) {
		return 0, false
	}
	seconds := daysFromCivil(year, month, day)*86400 + hour*3600 + minute*60 + second - offset
	return seconds, seconds >= minSeconds && seconds <= maxSeconds
}

func isLeap(year int64) bool { return year%4 == 0 && (year%100 != 0 || year%400 == 0) }

func daysInMonth(year, month int64) int64 {
	switch month {
	case 2:
		if isLeap(year) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// daysFromCivil: days since 1970-01-01 (Howard Hinnant's algorithm).
func daysFromCivil(year, month, day int64) int64 {
	y := year
	if month <= 2 {
		y--
	}
	era := floorDiv(y, 400)
	yoe := y - era*400
	mp := (month + 9) % 12
	doy := (153*mp+2)/5 + day - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

func civilFromDays(days int64) (int64, int64, int64) {
	z := days + 719468
	era := floorDiv(z, 146097)
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	day := doy - (153*mp+2)/5 + 1
	month := mp + 3
	if mp >= 10 {
		month = mp - 9
	}
	year := yoe + era*400
	if month <= 2 {
		year++
	}
	return year, month, day
}

func formatUTC(seconds int64) string {
	days := floorDiv(seconds, 86400)
	secs := seconds - days*86400
	year, month, day := civilFromDays(days)
	out := make([]byte, 0, 21)
	width := 4
	if year < 0 {
		out = append(out, '-')
		width = 3
		year = -year
	}
	digits := strconv.FormatInt(year, 10)
	for i := len(digits); i < width; i++ {
		out = append(out, '0')
	}
	out = append(out, digits...)
	separators := []byte("--T::")
	values := []int64{month, day, secs / 3600, secs / 60 % 60, secs % 60}
	for i, value := range values {
		out = append(out, separators[i])
		if value < 10 {
			out = append(out, '0')
		}
		out = strconv.AppendInt(out, value, 10)
	}
	return string(append(out, 'Z'))
}

// Condition is a status condition (metav1.Condition) as k8s-openapi reads
// and writes it: missing or null strings read as empty,
// lastTransitionTime is required, unknown fields are ignored; written in
// k8s-openapi's field order.
type Condition struct {
	LastTransitionTime Time   `json:"lastTransitionTime"`
	Message            string `json:"message"`
	ObservedGeneration *int64 `json:"observedGeneration,omitempty"`
	Reason             string `json:"reason"`
	Status             string `json:"status"`
	Type               string `json:"type"`
}

// UnmarshalJSON reads a condition; lastTransitionTime is required.
func (c *Condition) UnmarshalJSON(data []byte) error {
	var fields struct {
		LastTransitionTime *Time   `json:"lastTransitionTime"`
		Message            *string `json:"message"`
		ObservedGeneration *int64  `json:"observedGeneration"`
		Reason             *string `json:"reason"`
		Status             *string `json:"status"`
		Type               *string `json:"type"`
	}
	if err := json.Unmarshal(data, &fields); err != nil {
		return err
	}
	if fields.LastTransitionTime == nil {
		return errors.New("missing field `lastTransitionTime`")
	}
	str := func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	}
	*c = Condition{*fields.LastTransitionTime, str(fields.Message), fields.ObservedGeneration,
		str(fields.Reason), str(fields.Status), str(fields.Type)}
	return nil
}

// SetCondition sets condition next in conditions, keeping its
// lastTransitionTime when the condition's status did not change: without
// this, every reconcile would write a new timestamp, and the host a new
// status.
func SetCondition(conditions []Condition, next Condition) []Condition {
	for i := range conditions {
		if conditions[i].Type == next.Type {
			if conditions[i].Status == next.Status {
				next.LastTransitionTime = conditions[i].LastTransitionTime
			}
			conditions[i] = next
			return conditions
		}
	}
	return append(conditions, next)
}

// Meta is an object's metadata as plugins read it: a small part of
// ObjectMeta, every field optional.
type Meta struct {
	Name              *string           `json:"name,omitempty"`
	Namespace         *string           `json:"namespace,omitempty"`
	UID               *string           `json:"uid,omitempty"`
	Generation        *int64            `json:"generation,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
	DeletionTimestamp *Time             `json:"deletionTimestamp,omitempty"`
}
