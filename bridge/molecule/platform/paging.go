package platform

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"
)

// pageRows is the limit every activity poll asks for: the most the platform gives in one answer
// (handlers/activity.go List: limit defaults to 100 and is capped at 500). An answer holding
// that many rows may have more behind it, with or without a cursor.
const pageRows = 500

// PageLimits bound what one poll keeps of the activity feed.
type PageLimits struct {
	Rows  int   // rows: the room left in the unacked window
	Bytes int64 // bytes of row text held (MaxPollBytes)
	// page is the rows one answer holds at most (the query's limit); 0 means pageRows. An
	// answer that full may have rows after it.
	page int
}

func (l PageLimits) pageSize() int {
	if l.page > 0 {
		return l.page
	}
	return pageRows
}

// Page is what a poll kept, oldest first.
type Page struct {
	Rows []Row
	// More says rows were left for later (a limit, or a full answer): the next poll, from the
	// last row kept, should come at once.
	More bool
}

// poll fetches inbound rows after cursor (oldest first), or, when cursor is empty, the last
// sinceSecs seconds (the first start, and after a 410). The platform answers at most a page of
// rows (pageRows) either way: a cursor's page is oldest first, and the next poll reads on from
// its last row; the window is newest first, so it is walked back page by page (before_ts) to
// its oldest row, and no row of it is skipped however many there are. Each answer is read as a
// stream, one row at a time, and what is kept stays within lim and the row cap; see
// keepOldestFirst and windowKeeper. With a cursor, rows read before a failure are returned with
// the error: they are complete and follow the cursor. ErrCursorGone reports a 410.
//
// RequestTimeout bounds the wait for each answer and for each read of it, not the whole answer:
// a large page that keeps coming is not cut off, one that stalls is.
func (c *Client) Poll(ctx context.Context, cursor string, sinceSecs int, lim PageLimits) (Page, error) {
	if cursor == "" {
		return c.pollWindow(ctx, sinceSecs, lim)
	}
	q := c.activityQuery(lim)
	q.Set("since_id", cursor)
	var pg Page
	err := c.readPage(ctx, q, func(sc *rowScanner) error {
		var err error
		pg, err = keepOldestFirst(sc, lim)
		return err
	})
	return pg, err
}

func (c *Client) activityQuery(lim PageLimits) url.Values {
	return url.Values{"type": {"a2a_receive"}, "include": {"peer_info"}, "limit": {strconv.Itoa(lim.pageSize())}}
}

// pollWindow reads the window of the last sinceSecs seconds, newest first, and keeps its oldest
// rows within lim. An answer as long as the page may not reach the window's start: the next
// asks for the rows before the oldest one it held (before_ts). before_ts is strictly older, and
// rows can share a created_at (microseconds), so it is one microsecond past that row's: a row
// served twice at a page's edge is recognised by its id and counted once. The walk ends at an
// answer shorter than the page, or one that brings nothing new (more rows than a page in one
// microsecond would end it early; the platform writes nothing that fast). On an error nothing is
// kept: without the window's start the oldest rows are unknown.
func (c *Client) pollWindow(ctx context.Context, sinceSecs int, lim PageLimits) (Page, error) {
	keep := windowKeeper{lim: lim}
	seen := make(map[string]bool)
	before := ""
	for {
		q := c.activityQuery(lim)
		q.Set("since_secs", strconv.Itoa(sinceSecs))
		if before != "" {
			q.Set("before_ts", before)
		}
		served, fresh := 0, 0
		var oldest time.Time
		var ids []string
		err := c.readPage(ctx, q, func(sc *rowScanner) error {
			for {
				row, ok, err := sc.next()
				if err != nil || !ok {
					return err
				}
				served++
				if t, ok := rowCreatedAt(row); ok && (oldest.IsZero() || t.Before(oldest)) {
					oldest = t
				}
				// Only rows an earlier answer held are dropped: a row twice in one answer is
				// the platform's and goes on to the ledger, which answers it once.
				if row.ID != "" {
					if seen[row.ID] {
						continue
					}
					ids = append(ids, row.ID)
				}
				fresh++
				keep.add(row)
			}
		})
		if err != nil {
			return Page{}, err
		}
		for _, id := range ids {
			seen[id] = true
		}
		if served < lim.pageSize() || fresh == 0 || oldest.IsZero() {
			return keep.page(), nil
		}
		before = oldest.Add(time.Microsecond).UTC().Format(time.RFC3339Nano)
	}
}

// rowCreatedAt is a kept row's created_at.
func rowCreatedAt(row Row) (time.Time, bool) {
	if row.Oversized() {
		return time.Time{}, false
	}
	var r struct {
		CreatedAt string `json:"created_at"`
	}
	if json.Unmarshal(row.Raw, &r) != nil {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, r.CreatedAt)
	return t, err == nil
}

// readPage makes one activity call with query q and hands its rows to read as a stream. A 410
// is ErrCursorGone; another non-2xx answer an *HTTPError.
func (c *Client) readPage(ctx context.Context, q url.Values, read func(*rowScanner) error) error {
	// The wait for the rate gate is not the call's: the idle deadline starts after it.
	if err := c.gate.wait(ctx, ClassPoll); err != nil {
		return fmt.Errorf("poll: waiting for the platform's rate limit: %w", err)
	}
	parent := ctx
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	idleErr := fmt.Errorf("no data from the platform for %s (RequestTimeout)", c.timeout)
	idle := time.AfterFunc(c.timeout, func() { cancel(idleErr) })
	defer idle.Stop()
	// failed names the idle deadline when it is why err happened; err already names the poll.
	failed := func(err error) error {
		if parent.Err() == nil && errors.Is(context.Cause(ctx), idleErr) {
			return fmt.Errorf("poll: %w", idleErr)
		}
		return err
	}

	resp, err := c.start(ctx, request{op: "poll", method: http.MethodGet, path: "/workspaces/" + c.ws + "/activity", query: q,
		class: ClassPoll, admitted: true})
	if err != nil {
		return failed(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		body, err := c.readSmall("poll", resp)
		if err != nil {
			return failed(err)
		}
		if resp.StatusCode == http.StatusGone {
			return ErrCursorGone
		}
		return c.statusErr("poll", resp, body)
	}
	if err := read(newRowScanner(idleReader{r: resp.Body, idle: idle, d: c.timeout}, c.maxRow)); err != nil {
		return failed(fmt.Errorf("poll: %w", err))
	}
	return nil
}

// idleReader pushes the idle deadline back whenever data arrives.
type idleReader struct {
	r    io.Reader
	idle *time.Timer
	d    time.Duration
}

func (r idleReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.idle.Reset(r.d)
	}
	return n, err
}

// keepOldestFirst reads a page that is oldest first (a since_id page) and keeps its rows in
// order until lim is reached; the rest of the page is left unread and comes with the next poll,
// which starts after the last row kept. A page as long as lim.page may have rows after it: more
// is set. On an error the rows kept so far are returned with it.
func keepOldestFirst(sc *rowScanner, lim PageLimits) (Page, error) {
	var pg Page
	var held int64
	for {
		row, ok, err := sc.next()
		if err != nil {
			return pg, err
		}
		if !ok {
			pg.More = len(pg.Rows) >= lim.pageSize()
			return pg, nil
		}
		pg.Rows = append(pg.Rows, row)
		held += int64(len(row.Raw))
		if len(pg.Rows) >= lim.Rows || held >= lim.Bytes {
			pg.More = true
			return pg, nil
		}
	}
}

// windowKeeper takes a window's rows newest first (across pages) and keeps the oldest within
// lim: as older rows arrive, the newest kept ones are let go. The next poll, since_id the newest
// row kept, then reads the rows let go, oldest first, so no row of the window is skipped and the
// oldest are answered first. At least one row is kept.
type windowKeeper struct {
	lim  PageLimits
	kept []Row // newest first; kept[0] is let go first
	held int64
	more bool
}

func (w *windowKeeper) add(row Row) {
	w.kept = append(w.kept, row)
	w.held += int64(len(row.Raw))
	for len(w.kept) > 1 && (len(w.kept) > w.lim.Rows || w.held > w.lim.Bytes) {
		w.held -= int64(len(w.kept[0].Raw))
		w.kept[0] = Row{} // let the text go now, not when the slice is reallocated
		w.kept = w.kept[1:]
		w.more = true
	}
}

// page is the rows kept, oldest first.
func (w *windowKeeper) page() Page {
	slices.Reverse(w.kept)
	return Page{Rows: w.kept, More: w.more}
}

// keepOldestOfWindow reads one newest-first page to its end and keeps its oldest rows within
// lim (windowKeeper). On an error nothing is kept.
func keepOldestOfWindow(sc *rowScanner, lim PageLimits) (Page, error) {
	w := windowKeeper{lim: lim}
	for {
		row, ok, err := sc.next()
		if err != nil {
			return Page{}, err
		}
		if !ok {
			return w.page(), nil
		}
		w.add(row)
	}
}
