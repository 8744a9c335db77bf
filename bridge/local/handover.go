package local

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/supervisor"
)

// A reload of the daemon hands a running turn to its next image (supervisor.ErrHandedOver).
// The caller waiting for its plain (JSON) answer keeps its connection: the handler takes the
// connection from net/http (hijack) without answering, the daemon hands it to its next image
// with the message (Waiting), and the next image gives the message to its supervisor again
// (ResumeWaiting), which attaches it to the turn, and writes the answer on the connection. The
// messages of a chat queued behind the turn cross the same way, in their order.

// Waiting is a message whose caller waits for its answer on a connection taken from net/http.
type Waiting struct {
	Conn      net.Conn
	ChatKey   string
	MessageID string
	Text      string
	// Seq orders the inbox's messages as they were received.
	Seq uint64
}

// waitingSet holds the connections of messages handed over, until the daemon takes them.
type waitingSet struct {
	prefix string

	mu       sync.Mutex
	cond     *sync.Cond
	seq      uint64
	list     []Waiting
	inSubmit int // messages being answered now that may be handed over (submitting, resumeChat)
	wg       sync.WaitGroup
}

func newWaitingSet() *waitingSet {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	w := &waitingSet{prefix: "local-" + hex.EncodeToString(b)}
	w.cond = sync.NewCond(&w.mu)
	return w
}

// newID names a message for good (supervisor.Input.MessageID) and numbers it.
func (ws *waitingSet) newID() (string, uint64) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.seq++
	return fmt.Sprintf("%s-%d", ws.prefix, ws.seq), ws.seq
}

// submitting counts a message whose Submit is under way and whose connection a reload may hand
// over; the returned func ends it. TakeWaiting waits for these: a Submit returns ErrHandedOver
// before its handler puts the caller on the list, and a caller taken in between would be left
// behind with the old image.
func (ws *waitingSet) submitting() (done func()) {
	ws.mu.Lock()
	ws.inSubmit++
	ws.mu.Unlock()
	return func() {
		ws.mu.Lock()
		ws.inSubmit--
		ws.cond.Broadcast()
		ws.mu.Unlock()
	}
}

func (ws *waitingSet) add(w ...Waiting) {
	ws.mu.Lock()
	ws.list = append(ws.list, w...)
	ws.mu.Unlock()
}

// hijack takes w's connection from net/http for wt; false when it cannot (HTTP/2, a test's
// recorder): the caller is then answered as before a shutdown.
func (ws *waitingSet) hijack(w http.ResponseWriter, wt Waiting, log *zap.Logger) bool {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		log.Warn("a reload handed the message's turn over, but its connection cannot be; the caller is told to send it again", zap.Error(err))
		return false
	}
	if n := brw.Reader.Buffered(); n > 0 {
		// A request pipelined behind this one: it was never answered, and is not now.
		log.Warn("bytes after the request are dropped with the handed-over connection", zap.Int("bytes", n))
	}
	_ = conn.SetDeadline(time.Time{})
	wt.Conn = conn
	ws.add(wt)
	log.Info("the message's turn crosses the reload; its connection is handed over", zap.String("message_id", wt.MessageID))
	return true
}

// TakeWaiting returns the messages whose connections are handed over, in the order received,
// and forgets them: the caller hands them to the next image, or back to ResumeWaiting. It
// waits, until ctx is done, for the messages ResumeWaiting is answering to be handed over
// again or answered.
func (h *Inbox) TakeWaiting(ctx context.Context) ([]Waiting, error) {
	ws := h.waiting
	stop := context.AfterFunc(ctx, func() {
		ws.mu.Lock()
		ws.cond.Broadcast()
		ws.mu.Unlock()
	})
	defer stop()
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for ws.inSubmit > 0 && ctx.Err() == nil {
		ws.cond.Wait()
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("local inbox: %d handed-over messages still being answered: %w", ws.inSubmit, context.Cause(ctx))
	}
	out := ws.list
	ws.list = nil
	slices.SortFunc(out, func(a, b Waiting) int { return cmp.Compare(a.Seq, b.Seq) })
	return out, nil
}

// ResumeWaiting gives each message to the supervisor again, each chat's in order (the first
// attaches to the chat's handed-over turn, the others queue behind it), and writes each answer
// on its connection, which it then closes. Wait waits for them.
func (h *Inbox) ResumeWaiting(list []Waiting) {
	byChat := map[string][]Waiting{}
	var order []string
	for _, w := range list {
		if _, ok := byChat[w.ChatKey]; !ok {
			order = append(order, w.ChatKey)
		}
		byChat[w.ChatKey] = append(byChat[w.ChatKey], w)
	}
	for _, key := range order {
		chat := byChat[key]
		h.waiting.mu.Lock()
		h.waiting.inSubmit++
		h.waiting.mu.Unlock()
		h.waiting.wg.Go(func() { h.resumeChat(chat) })
	}
}

// resumeChat answers one chat's handed-over messages in order.
func (h *Inbox) resumeChat(list []Waiting) {
	ws := h.waiting
	defer func() {
		ws.mu.Lock()
		ws.inSubmit--
		ws.cond.Broadcast()
		ws.mu.Unlock()
	}()
	for i, w := range list {
		log := h.log.With(zap.String("chat_key", w.ChatKey), zap.String("message_id", w.MessageID))
		start := time.Now()
		reply, err := h.cfg.Answerer.SubmitInput(context.Background(), w.ChatKey, supervisor.Input{Text: w.Text, MessageID: w.MessageID})
		if errors.Is(err, supervisor.ErrHandedOver) || errors.Is(err, supervisor.ErrReloading) {
			// Another reload: this message and those after it cross again.
			ws.add(list[i:]...)
			log.Info("the message crosses another reload with its connection")
			return
		}
		cw := &connWriter{header: http.Header{}}
		h.respond(h.redacting(cw), false, log, w.ChatKey, start, reply, err, nil)
		_ = w.Conn.SetWriteDeadline(time.Now().Add(h.cfg.WriteTimeout))
		if err := cw.writeTo(w.Conn); err != nil {
			log.Info("the answer could not be written to the handed-over connection", zap.Error(err))
		}
		_ = w.Conn.Close()
	}
}

// Wait waits for the answers ResumeWaiting writes.
func (h *Inbox) Wait() { h.waiting.wg.Wait() }

// connWriter is the http.ResponseWriter of an answer written on a handed-over connection: one
// HTTP/1.1 response, after which the connection is closed.
type connWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (c *connWriter) Header() http.Header { return c.header }

func (c *connWriter) WriteHeader(status int) {
	if c.status == 0 {
		c.status = status
	}
}

func (c *connWriter) Write(b []byte) (int, error) {
	c.WriteHeader(http.StatusOK)
	return c.body.Write(b)
}

func (c *connWriter) writeTo(conn net.Conn) error {
	c.WriteHeader(http.StatusOK)
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", c.status, http.StatusText(c.status))
	c.header.Set("Content-Length", fmt.Sprint(c.body.Len()))
	c.header.Set("Connection", "close")
	c.header.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	_ = c.header.Write(&b)
	b.WriteString("\r\n")
	b.Write(c.body.Bytes())
	_, err := conn.Write(b.Bytes())
	return err
}
