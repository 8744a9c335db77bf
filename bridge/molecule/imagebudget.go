package molecule

import (
	"fmt"
	"sync"
)

// imageBudget bounds the image data held by messages that wait for their answer
// (Config.MaxPendingImageBytes). Each message reserves its images' bytes when it is
// admitted and releases them once its reply is settled or it was dropped.
type imageBudget struct {
	mu   sync.Mutex
	max  int64
	held int64
}

// reserve takes n bytes, or reports false (taking nothing) when they do not fit.
func (b *imageBudget) reserve(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held+n > b.max {
		return false
	}
	b.held += n
	return true
}

// release gives back n reserved bytes.
func (b *imageBudget) release(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held -= n
}

// admitImages reserves msg's images in b, or replaces them with a note when the budget is full.
// It returns the message to queue and whether its images were dropped.
func (b *imageBudget) admitImages(msg message) (message, bool) {
	if len(msg.Images) == 0 || b.reserve(msg.ImageBytes()) {
		return msg, false
	}
	msg.Text += fmt.Sprintf("\n\n[%d image(s) not shown: the images of messages waiting for an answer already fill the daemon's %.1f MiB]",
		len(msg.Images), float64(b.max)/(1<<20))
	msg.Images = nil
	return msg, true
}
