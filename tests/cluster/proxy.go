package main

// A fault-injecting proxy in front of the cluster's kube-apiserver, for
// failure-injection tests:
//
//	kubeplug-cluster proxy --dir DIR [--name proxy] [--listen 127.0.0.1:0]
//	                       [--control 127.0.0.1:0] [--faults QUERY] [--upstream URL]
//
// It serves TLS on loopback with a certificate signed by the cluster CA
// (DIR/pki/<name>.crt: 127.0.0.1, ::1, localhost), forwards every request
// (watches and chunked responses streamed, flushed at once) to the API server
// with the admin client certificate (DIR/pki/admin.crt), keeping the
// client's headers (User-Agent, Impersonate-*, Accept, ...) except
// Authorization, and injects faults that a plain-HTTP control endpoint on
// loopback changes at run time: latency, 429s with Retry-After, cutting all
// connections, refusing new ones. It writes DIR/<name>-kubeconfig (pointing at
// the proxy) and DIR/<name>.env (PROXY_KUBECONFIG, PROXY_URL, PROXY_PID,
// PROXY_CONTROL) once both listeners are up. See README.md ("Fault proxy").

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	maxRequestLog = 10000 // request records kept for GET /requests
	maxRejections = 10000 // 429 records kept for GET /stats
)

// faultSettings are the faults in effect; changed through POST /faults.
type faultSettings struct {
	Latency          time.Duration // delay before forwarding (and before answering with a fault)
	Reject429        float64       // fraction of non-watch requests answered with 429
	RetryAfter       int           // seconds, Retry-After header and details.retryAfterSeconds
	RejectWritesOnly bool          // 429s only for create/update/patch/delete/deletecollection
	RejectNext       int           // the next N matching requests get a 429 regardless of reject429
	Match            string        // faults only for request paths containing this ("" = all)
	Down             bool          // refuse new connections (after cutting the open ones)
	DownMode         string        // reset | refuse | 503
}

func defaultFaults() faultSettings { return faultSettings{RetryAfter: 1, DownMode: "reset"} }

func (f faultSettings) toJSON() map[string]any {
	return map[string]any{
		"latency":          f.Latency.String(),
		"latencyMs":        float64(f.Latency) / float64(time.Millisecond),
		"reject429":        f.Reject429,
		"retryAfter":       f.RetryAfter,
		"rejectWritesOnly": f.RejectWritesOnly,
		"rejectNext":       f.RejectNext,
		"match":            f.Match,
		"down":             f.Down,
		"downMode":         f.DownMode,
	}
}

func parseBool(k, v string) (bool, error) {
	if v == "" {
		return true, nil // "?cut" alone means cut=true
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s: %q is not a boolean", k, v)
	}
	return b, nil
}

// apply sets the given keys on a copy of f. Keys: latency (Go duration, or a
// number = milliseconds), reject429 (0..1), retryAfter (whole seconds, or a Go
// duration rounded up), rejectWritesOnly, rejectNext, match, down, downMode,
// cut (returned, not stored), clear (start from the defaults).
func (f faultSettings) apply(q url.Values) (faultSettings, bool, error) {
	out := f
	if v, ok := q["clear"]; ok {
		b, err := parseBool("clear", v[0])
		if err != nil {
			return f, false, err
		}
		if b {
			out = defaultFaults()
		}
	}
	cut := false
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := q.Get(k)
		switch k {
		case "clear":
		case "latency":
			if ms, err := strconv.ParseFloat(v, 64); err == nil {
				out.Latency = time.Duration(ms * float64(time.Millisecond))
			} else if d, err := time.ParseDuration(v); err == nil {
				out.Latency = d
			} else {
				return f, false, fmt.Errorf("latency: %q is neither a duration (200ms) nor milliseconds", v)
			}
			if out.Latency < 0 {
				return f, false, errors.New("latency: negative")
			}
		case "reject429":
			x, err := strconv.ParseFloat(v, 64)
			if err != nil || x < 0 || x > 1 || math.IsNaN(x) {
				return f, false, fmt.Errorf("reject429: %q is not a fraction in [0,1]", v)
			}
			out.Reject429 = x
		case "retryAfter":
			if n, err := strconv.Atoi(v); err == nil && n >= 0 {
				out.RetryAfter = n
			} else if d, err := time.ParseDuration(v); err == nil && d >= 0 {
				out.RetryAfter = int(math.Ceil(d.Seconds()))
			} else {
				return f, false, fmt.Errorf("retryAfter: %q is not whole seconds >= 0", v)
			}
		case "rejectWritesOnly":
			b, err := parseBool(k, v)
			if err != nil {
				return f, false, err
			}
			out.RejectWritesOnly = b
		case "rejectNext":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return f, false, fmt.Errorf("rejectNext: %q is not a count >= 0", v)
			}
			out.RejectNext = n
		case "match":
			out.Match = v
		case "down":
			b, err := parseBool(k, v)
			if err != nil {
				return f, false, err
			}
			out.Down = b
		case "downMode":
			switch v {
			case "reset", "refuse", "503":
				out.DownMode = v
			default:
				return f, false, fmt.Errorf("downMode: %q is not reset, refuse or 503", v)
			}
		case "cut":
			b, err := parseBool(k, v)
			if err != nil {
				return f, false, err
			}
			cut = b
		default:
			return f, false, fmt.Errorf("unknown fault %q (known: latency, reject429, retryAfter, rejectWritesOnly, rejectNext, match, down, downMode, cut, clear)", k)
		}
	}
	return out, cut, nil
}

type verbStats struct {
	Requests       int64 `json:"requests"`
	Forwarded      int64 `json:"forwarded"`
	Rejected429    int64 `json:"rejected429"`
	Down503        int64 `json:"down503"`
	UpstreamErrors int64 `json:"upstreamErrors"`
}

// requestRecord is one request as the proxy saw it (GET /requests).
type requestRecord struct {
	Seq             int64     `json:"seq"`
	Time            time.Time `json:"time"` // arrival, before any latency
	Method          string    `json:"method"`
	Path            string    `json:"path"`
	Query           string    `json:"query"`
	Verb            string    `json:"verb"`
	UserAgent       string    `json:"userAgent"`
	ImpersonateUser string    `json:"impersonateUser,omitempty"`
	// forwarded | 429 | down | upstream-error | client-gone | in-progress
	Result string `json:"result"`
	Status int    `json:"status,omitempty"` // HTTP status sent to the client (forwarded: the API server's)
}

// rejectionRecord is one 429 sent, and the retry that followed it.
type rejectionRecord struct {
	Seq               int64     `json:"seq"`  // seq of the rejected request
	Time              time.Time `json:"time"` // when the 429 was sent
	Method            string    `json:"method"`
	Path              string    `json:"path"`
	Query             string    `json:"query"`
	Verb              string    `json:"verb"`
	UserAgent         string    `json:"userAgent"`
	RetryAfterSeconds int       `json:"retryAfterSeconds"`
	// the next request with the same method, path, query and User-Agent
	RetrySeq          int64      `json:"retrySeq,omitempty"`
	RetryTime         *time.Time `json:"retryTime,omitempty"`
	RetryDelaySeconds *float64   `json:"retryDelaySeconds,omitempty"` // RetryTime - Time
	RetriedEarly      *bool      `json:"retriedEarly,omitempty"`      // RetryDelaySeconds < RetryAfterSeconds

	sent time.Time // Time with the monotonic clock, for the delay
}

type recordKey struct{}

type faultProxy struct {
	upstream    *url.URL
	rp          *httputil.ReverseProxy
	infoFactory *apirequest.RequestInfoFactory
	ln          *faultListener

	setMu      sync.Mutex // serialises fault changes (control requests)
	mu         sync.Mutex
	faults     faultSettings
	seq        int64
	requests   int64
	forwarded  int64
	rejected   int64
	down503    int64
	upErrors   int64
	cuts       int64
	connsCut   int64
	openWatch  int64
	verbs      map[string]*verbStats
	rejections []*rejectionRecord
	pending    map[string][]*rejectionRecord // 429s waiting for their retry
	reqLog     []*requestRecord
}

func (p *faultProxy) verb(v string) *verbStats {
	s := p.verbs[v]
	if s == nil {
		s = &verbStats{}
		p.verbs[v] = s
	}
	return s
}

func retryKey(method, path, query, ua string) string {
	return method + " " + path + "?" + query + " " + ua
}

func isWriteVerb(v string) bool {
	switch v {
	case "create", "update", "patch", "delete", "deletecollection", "post", "put":
		return true
	}
	return false
}

func (p *faultProxy) verbOf(r *http.Request) string {
	info, err := p.infoFactory.NewRequestInfo(r)
	if err != nil || info == nil || info.Verb == "" {
		return strings.ToLower(r.Method)
	}
	return info.Verb
}

// arrive records a request and returns its record and the faults in effect.
func (p *faultProxy) arrive(now time.Time, r *http.Request, verb string) (*requestRecord, faultSettings) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq++
	rec := &requestRecord{
		Seq: p.seq, Time: now.UTC(), Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Verb: verb,
		UserAgent: r.UserAgent(), ImpersonateUser: r.Header.Get("Impersonate-User"), Result: "in-progress",
	}
	p.reqLog = append(p.reqLog, rec)
	if len(p.reqLog) > maxRequestLog {
		p.reqLog = append([]*requestRecord(nil), p.reqLog[len(p.reqLog)-maxRequestLog*9/10:]...)
	}
	p.requests++
	p.verb(verb).Requests++
	key := retryKey(r.Method, r.URL.Path, r.URL.RawQuery, r.UserAgent())
	if q := p.pending[key]; len(q) > 0 {
		rj := q[0]
		if len(q) == 1 {
			delete(p.pending, key)
		} else {
			p.pending[key] = q[1:]
		}
		t := now.UTC()
		d := now.Sub(rj.sent).Seconds()
		early := d < float64(rj.RetryAfterSeconds)
		rj.RetrySeq, rj.RetryTime, rj.RetryDelaySeconds, rj.RetriedEarly = rec.Seq, &t, &d, &early
	}
	return rec, p.faults
}

func (p *faultProxy) finish(rec *requestRecord, result string, status int) {
	p.mu.Lock()
	rec.Result, rec.Status = result, status
	p.mu.Unlock()
}

// takeReject decides, with the faults in effect now, whether this request gets a 429.
func (p *faultProxy) takeReject(r *http.Request, verb string) (bool, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := &p.faults
	if verb == "watch" || (f.Match != "" && !strings.Contains(r.URL.Path, f.Match)) ||
		(f.RejectWritesOnly && !isWriteVerb(verb)) {
		return false, 0
	}
	if f.RejectNext > 0 {
		f.RejectNext--
		return true, f.RetryAfter
	}
	if f.Reject429 > 0 && (f.Reject429 >= 1 || rand.Float64() < f.Reject429) {
		return true, f.RetryAfter
	}
	return false, 0
}

func (p *faultProxy) isDown() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.faults.Down
}

// resetsNewConnections: down with downMode=reset.
func (p *faultProxy) resetsNewConnections() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.faults.Down && p.faults.DownMode == "reset"
}

func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, message string, retryAfter int) {
	st := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Message:  message,
		Reason:   reason,
		Code:     int32(code),
	}
	if retryAfter >= 0 {
		st.Details = &metav1.StatusDetails{RetryAfterSeconds: int32(retryAfter)}
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
	body, _ := json.Marshal(st)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache, private")
	w.WriteHeader(code)
	_, _ = w.Write(append(body, '\n'))
}

func (p *faultProxy) writeDown(w http.ResponseWriter, rec *requestRecord, verb string) {
	writeStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
		"the API server is unavailable (kubeplug-cluster proxy fault: down)", -1)
	p.mu.Lock()
	p.down503++
	p.verb(verb).Down503++
	rec.Result, rec.Status = "down", http.StatusServiceUnavailable
	p.mu.Unlock()
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	verb := p.verbOf(r)
	rec, f := p.arrive(time.Now(), r, verb)
	if f.Down {
		p.writeDown(w, rec, verb)
		return
	}
	if f.Latency > 0 && (f.Match == "" || strings.Contains(r.URL.Path, f.Match)) {
		t := time.NewTimer(f.Latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			p.finish(rec, "client-gone", 0)
			return
		}
	}
	if reject, retryAfter := p.takeReject(r, verb); reject {
		writeStatus(w, http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests,
			"Too many requests, please try again later. (kubeplug-cluster proxy fault: reject429)", retryAfter)
		now := time.Now()
		p.mu.Lock()
		p.rejected++
		p.verb(verb).Rejected429++
		rec.Result, rec.Status = "429", http.StatusTooManyRequests
		rj := &rejectionRecord{
			Seq: rec.Seq, Time: now.UTC(), sent: now, Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Verb: verb,
			UserAgent: r.UserAgent(), RetryAfterSeconds: retryAfter,
		}
		p.rejections = append(p.rejections, rj)
		if len(p.rejections) > maxRejections {
			p.rejections = append([]*rejectionRecord(nil), p.rejections[len(p.rejections)-maxRejections*9/10:]...)
		}
		key := retryKey(r.Method, r.URL.Path, r.URL.RawQuery, r.UserAgent())
		p.pending[key] = append(p.pending[key], rj)
		p.mu.Unlock()
		return
	}
	if p.isDown() { // set while this request waited out the latency
		p.writeDown(w, rec, verb)
		return
	}
	p.mu.Lock()
	p.forwarded++
	p.verb(verb).Forwarded++
	if verb == "watch" {
		p.openWatch++
	}
	p.mu.Unlock()
	if verb == "watch" {
		defer func() {
			p.mu.Lock()
			p.openWatch--
			p.mu.Unlock()
		}()
	}
	p.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), recordKey{}, rec)))
}

func (p *faultProxy) modifyResponse(res *http.Response) error {
	if rec, ok := res.Request.Context().Value(recordKey{}).(*requestRecord); ok {
		p.finish(rec, "forwarded", res.StatusCode)
	}
	return nil
}

func (p *faultProxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	rec, _ := r.Context().Value(recordKey{}).(*requestRecord)
	if r.Context().Err() != nil { // the client went away (or its connection was cut)
		if rec != nil {
			p.finish(rec, "client-gone", 0)
		}
		return
	}
	logf("proxy: %s %s: upstream: %v", r.Method, r.URL.Path, err)
	writeStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
		fmt.Sprintf("kubeplug-cluster proxy: the API server at %s is unreachable: %v", p.upstream, err), -1)
	p.mu.Lock()
	p.upErrors++
	if rec != nil {
		p.verb(rec.Verb).UpstreamErrors++
		rec.Result, rec.Status = "upstream-error", http.StatusServiceUnavailable
	}
	p.mu.Unlock()
}

// setFaults applies new faults: going down cuts every open connection first;
// downMode=refuse closes the listening socket (connection refused) until up again.
func (p *faultProxy) setFaults(q url.Values) (faultSettings, error) {
	p.setMu.Lock()
	defer p.setMu.Unlock()
	p.mu.Lock()
	old := p.faults
	nf, cut, err := old.apply(q)
	if err != nil {
		p.mu.Unlock()
		return old, err
	}
	p.faults = nf
	p.mu.Unlock()
	if err := p.ln.setRefusing(nf.Down && nf.DownMode == "refuse"); err != nil {
		p.mu.Lock()
		p.faults.Down, p.faults.DownMode = true, "refuse"
		p.mu.Unlock()
		return p.faults, fmt.Errorf("could not listen on %s again, still refusing: %w", p.ln.addr, err)
	}
	if cut || (nf.Down && !old.Down) {
		n := p.ln.cutAll()
		p.mu.Lock()
		p.cuts++
		p.connsCut += int64(n)
		p.mu.Unlock()
		logf("proxy: cut %d connection(s)", n)
	}
	logf("proxy: faults %v", nf.toJSON())
	return nf, nil
}

func (p *faultProxy) stats() map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	verbs := map[string]verbStats{}
	for k, v := range p.verbs {
		verbs[k] = *v
	}
	rej := make([]rejectionRecord, len(p.rejections))
	for i, r := range p.rejections {
		rej[i] = *r
	}
	accepted, reset, open := p.ln.counts()
	return map[string]any{
		"upstream":            p.upstream.String(),
		"requests":            p.requests,
		"forwarded":           p.forwarded,
		"rejected429":         p.rejected,
		"down503":             p.down503,
		"upstreamErrors":      p.upErrors,
		"cuts":                p.cuts,
		"connectionsCut":      p.connsCut,
		"connectionsAccepted": accepted,
		"connectionsReset":    reset,
		"openConnections":     open,
		"openWatches":         p.openWatch,
		"verbs":               verbs,
		"rejections":          rej,
		"faults":              p.faults.toJSON(),
	}
}

func (p *faultProxy) resetStats() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests, p.forwarded, p.rejected, p.down503, p.upErrors, p.cuts, p.connsCut = 0, 0, 0, 0, 0, 0, 0
	p.verbs = map[string]*verbStats{}
	p.rejections = nil
	p.pending = map[string][]*rejectionRecord{}
	p.reqLog = nil
	p.ln.resetCounts()
}

func (p *faultProxy) requestLog(since int64, limit int) []requestRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := []requestRecord{}
	for _, r := range p.reqLog {
		if r.Seq > since {
			out = append(out, *r)
			if limit > 0 && len(out) >= limit {
				break
			}
		}
	}
	return out
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func (p *faultProxy) controlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/faults", func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
			p.mu.Lock()
			f := p.faults
			p.mu.Unlock()
			writeJSON(w, 200, f.toJSON())
		case http.MethodPost, http.MethodPut, http.MethodDelete:
			if err := r.ParseForm(); err != nil {
				writeJSON(w, 400, map[string]string{"error": err.Error()})
				return
			}
			q := r.Form
			if r.Method == http.MethodDelete {
				q = url.Values{"clear": {"true"}}
			}
			f, err := p.setFaults(q)
			if err != nil {
				writeJSON(w, 400, map[string]any{"error": err.Error(), "faults": f.toJSON()})
				return
			}
			writeJSON(w, 200, f.toJSON())
		default:
			http.Error(w, "GET, POST or DELETE", http.StatusMethodNotAllowed)
		}
	})
	mux.HandleFunc("/cut", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST", http.StatusMethodNotAllowed)
			return
		}
		f, err := p.setFaults(url.Values{"cut": {"true"}})
		if err != nil {
			writeJSON(w, 400, map[string]any{"error": err.Error()})
			return
		}
		writeJSON(w, 200, f.toJSON())
	})
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
			writeJSON(w, 200, p.stats())
		case http.MethodDelete:
			p.resetStats()
			writeJSON(w, 200, p.stats())
		default:
			http.Error(w, "GET or DELETE", http.StatusMethodNotAllowed)
		}
	})
	mux.HandleFunc("/stats/reset", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST", http.StatusMethodNotAllowed)
			return
		}
		p.resetStats()
		writeJSON(w, 200, p.stats())
	})
	mux.HandleFunc("/requests", func(w http.ResponseWriter, r *http.Request) {
		since, _ := strconv.ParseInt(r.URL.Query().Get("since"), 10, 64)
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		writeJSON(w, 200, p.requestLog(since, limit))
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(controlHelp))
	})
	return mux
}

// faultListener is the proxy's listening socket: it tracks accepted
// connections (to cut them), resets new ones while down (downMode=reset) and
// can close and reopen the socket on the same address (downMode=refuse).
type faultListener struct {
	addr  string
	p     *faultProxy
	mu    sync.Mutex
	cond  *sync.Cond
	inner net.Listener // nil while refusing
	done  bool
	conns map[*trackedConn]struct{}

	accepted, reset int64
}

type trackedConn struct {
	net.Conn
	l    *faultListener
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // RST instead of FIN
	}
	_ = c.Close()
}

func newFaultListener(addr string) (*faultListener, error) {
	inner, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	l := &faultListener{addr: inner.Addr().String(), inner: inner, conns: map[*trackedConn]struct{}{}}
	l.cond = sync.NewCond(&l.mu)
	return l, nil
}

func (l *faultListener) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		for l.inner == nil && !l.done {
			l.cond.Wait()
		}
		if l.done {
			l.mu.Unlock()
			return nil, net.ErrClosed
		}
		inner := l.inner
		l.mu.Unlock()

		c, err := inner.Accept()
		if err != nil {
			l.mu.Lock()
			same, done := l.inner == inner, l.done
			l.mu.Unlock()
			if done {
				return nil, net.ErrClosed
			}
			if !same { // closed by setRefusing; wait for it to reopen
				continue
			}
			return nil, err
		}
		if l.p.resetsNewConnections() {
			resetConn(c)
			l.mu.Lock()
			l.reset++
			l.mu.Unlock()
			continue
		}
		tc := &trackedConn{Conn: c, l: l}
		l.mu.Lock()
		l.accepted++
		l.conns[tc] = struct{}{}
		l.mu.Unlock()
		return tc, nil
	}
}

func (l *faultListener) setRefusing(refuse bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if refuse && l.inner != nil {
		err := l.inner.Close()
		l.inner = nil
		return err
	}
	if !refuse && l.inner == nil && !l.done {
		var err error
		for i := 0; i < 20; i++ { // the port was ours a moment ago; retry briefly
			var inner net.Listener
			if inner, err = net.Listen("tcp", l.addr); err == nil {
				l.inner = inner
				l.cond.Broadcast()
				return nil
			}
			time.Sleep(50 * time.Millisecond)
		}
		return err
	}
	return nil
}

// cutAll resets every open client connection; returns how many.
func (l *faultListener) cutAll() int {
	l.mu.Lock()
	conns := make([]*trackedConn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		if tc, ok := c.Conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
	return len(conns)
}

func (l *faultListener) counts() (accepted, reset int64, open int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.accepted, l.reset, len(l.conns)
}

func (l *faultListener) resetCounts() {
	l.mu.Lock()
	l.accepted, l.reset = 0, 0
	l.mu.Unlock()
}

func (l *faultListener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.done = true
	l.cond.Broadcast()
	if l.inner != nil {
		err := l.inner.Close()
		l.inner = nil
		return err
	}
	return nil
}

func (l *faultListener) Addr() net.Addr {
	a, _ := net.ResolveTCPAddr("tcp", l.addr)
	return a
}

const controlHelp = `kubeplug-cluster fault proxy control (see tests/cluster/README.md, "Fault proxy")
GET    /faults                 faults in effect (JSON)
POST   /faults?KEY=VALUE&...   change faults; keys: latency (200ms | ms number), reject429 (0..1),
                               retryAfter (seconds), rejectWritesOnly, rejectNext (count), match (path substring),
                               down, downMode (reset | refuse | 503), cut (close all connections now), clear
DELETE /faults                 back to no faults (and up again)
POST   /cut                    close all open client connections now
GET    /stats                  counters, per-verb counts, 429s with their retries (JSON)
POST   /stats/reset            zero the counters (also DELETE /stats)
GET    /requests?since=SEQ&limit=N   recent requests (JSON; last 10000)
GET    /healthz
`

var proxyNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$`)

func requireLoopback(what, addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q: %w", what, addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%s %q: only loopback addresses (the proxy presents admin credentials)", what, addr)
}

func kubeconfigServer(path string) (string, error) {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return "", err
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil || cfg.Clusters[ctx.Cluster] == nil {
		return "", fmt.Errorf("%s: no current context/cluster", path)
	}
	return cfg.Clusters[ctx.Cluster].Server, nil
}

func runProxy(args []string) int {
	fs := flag.NewFlagSet("proxy", flag.ExitOnError)
	dir := fs.String("dir", "", "cluster data directory (pki/, kubeconfig); proxy files are written there")
	name := fs.String("name", "proxy", "proxy name: files DIR/NAME-kubeconfig, DIR/NAME.env, DIR/pki/NAME.crt")
	listen := fs.String("listen", "127.0.0.1:0", "TLS listen address (loopback)")
	control := fs.String("control", "127.0.0.1:0", "plain-HTTP control listen address (loopback)")
	initial := fs.String("faults", "", "initial faults, same syntax as POST /faults (e.g. latency=200ms&reject429=0.5)")
	upstreamFlag := fs.String("upstream", "", "API server URL (default: the server in DIR/kubeconfig)")
	_ = fs.Parse(args)
	fail := func(err error) int {
		logf("proxy: FAILED: %v", err)
		return 1
	}
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "--dir is required")
		return 2
	}
	if !proxyNameRE.MatchString(*name) {
		fmt.Fprintf(os.Stderr, "--name %q: letters, digits, - and _ only\n", *name)
		return 2
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return fail(err)
	}
	*dir = abs
	if err := requireLoopback("--listen", *listen); err != nil {
		return fail(err)
	}
	if err := requireLoopback("--control", *control); err != nil {
		return fail(err)
	}
	pk := newPKIPaths(filepath.Join(*dir, "pki"))
	adminKubeconfig := filepath.Join(*dir, "kubeconfig")
	server := *upstreamFlag
	if server == "" {
		if server, err = kubeconfigServer(adminKubeconfig); err != nil {
			return fail(fmt.Errorf("upstream (start the cluster once with tests/cluster/up first): %w", err))
		}
	}
	upstream, err := url.Parse(server)
	if err != nil || upstream.Scheme != "https" || upstream.Host == "" {
		return fail(fmt.Errorf("upstream %q: not an https URL", server))
	}

	// TLS towards the API server: cluster CA, admin client certificate
	caPEM, err := os.ReadFile(pk.CACert)
	if err != nil {
		return fail(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fail(fmt.Errorf("%s: no certificates", pk.CACert))
	}
	adminCert, err := tls.LoadX509KeyPair(pk.AdminCert, pk.AdminKey)
	if err != nil {
		return fail(err)
	}
	transport := &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{adminCert}, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:     true,
		MaxIdleConnsPerHost:   100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}

	// TLS towards clients: a serving cert from the cluster CA
	certPath, keyPath := filepath.Join(pk.Dir, *name+".crt"), filepath.Join(pk.Dir, *name+".key")
	if err := ensureLoopbackServingCert(pk, "kubeplug-cluster-"+*name, certPath, keyPath); err != nil {
		return fail(fmt.Errorf("serving certificate: %w", err))
	}
	servingCert, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return fail(err)
	}

	p := &faultProxy{
		upstream: upstream,
		infoFactory: &apirequest.RequestInfoFactory{
			APIPrefixes:          sets.NewString("api", "apis"),
			GrouplessAPIPrefixes: sets.NewString("api"),
		},
		faults:  defaultFaults(),
		verbs:   map[string]*verbStats{},
		pending: map[string][]*rejectionRecord{},
	}
	errLog := log.New(os.Stderr, "kubeplug-cluster proxy: ", log.LstdFlags|log.Lmicroseconds)
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			// identity towards the API server is the admin client certificate
			pr.Out.Header.Del("Authorization")
		},
		Transport:      transport,
		FlushInterval:  -1, // stream: watches, chunked lists
		ErrorLog:       errLog,
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.upstreamError,
	}
	ln, err := newFaultListener(*listen)
	if err != nil {
		return fail(fmt.Errorf("listen %s: %w", *listen, err))
	}
	ln.p = p
	p.ln = ln
	if *initial != "" {
		q, err := url.ParseQuery(*initial)
		if err != nil {
			return fail(fmt.Errorf("--faults: %w", err))
		}
		if _, err := p.setFaults(q); err != nil {
			return fail(fmt.Errorf("--faults: %w", err))
		}
	}
	ctlLn, err := net.Listen("tcp", *control)
	if err != nil {
		return fail(fmt.Errorf("listen %s: %w", *control, err))
	}

	srv := &http.Server{
		Handler:           p,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{servingCert}, MinVersion: tls.VersionTLS12},
		ErrorLog:          errLog,
		ReadHeaderTimeout: 30 * time.Second,
	}
	ctlSrv := &http.Server{Handler: p.controlHandler(), ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 2)
	go func() { serveErr <- srv.ServeTLS(ln, "", "") }()
	go func() { serveErr <- ctlSrv.Serve(ctlLn) }()

	proxyURL := "https://" + ln.addr
	controlURL := "http://" + ctlLn.Addr().String()
	kubeconfig := filepath.Join(*dir, *name+"-kubeconfig")
	if err := writeKubeconfig(kubeconfig, proxyURL, pk.CACert, pk.AdminCert, pk.AdminKey, "kubeplug-admin"); err != nil {
		return fail(err)
	}
	envFile := filepath.Join(*dir, *name+".env")
	env := fmt.Sprintf("PROXY_KUBECONFIG=%s\nPROXY_URL=%s\nPROXY_PID=%d\nPROXY_CONTROL=%s\n", kubeconfig, proxyURL, os.Getpid(), controlURL)
	if err := os.WriteFile(envFile+".tmp", []byte(env), 0o644); err != nil {
		return fail(err)
	}
	if err := os.Rename(envFile+".tmp", envFile); err != nil {
		return fail(err)
	}
	logf("proxy: %s -> %s, control %s (pid %d)", proxyURL, upstream, controlURL, os.Getpid())

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	code := 0
loop:
	for {
		select {
		case <-ctx.Done():
			logf("proxy: signal received")
			break loop
		case err := <-serveErr:
			logf("proxy: server stopped: %v", err)
			code = 1
			break loop
		case <-tick.C:
			// the data dir was removed (e.g. rm -rf without down): don't linger
			if _, err := os.Stat(*dir); errors.Is(err, os.ErrNotExist) {
				logf("proxy: %s is gone; exiting", *dir)
				return 0
			}
		}
	}
	_ = os.Remove(envFile)
	_ = srv.Close()
	_ = ctlSrv.Close()
	_ = ln.Close()
	logf("proxy: stopped")
	return code
}
