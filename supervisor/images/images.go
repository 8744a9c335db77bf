// Package images decides which images of a chat's message codex is shown: each is checked by
// its header (package imagehdr) before codex decodes it, and one that is not shown gets a notice
// saying why.
package images

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/molecule-ai/codex-warm/internal/imagehdr"
)

// DefaultMaxPixels is the largest image, in pixels, codex is given (the supervisor's
// Config.MaxImagePixels).
//
// codex 0.169 decodes every inline (data: URL) image whole before it does anything else with it:
// codex-rs/utils/image/src/lib.rs (openai/codex) validates the URL with
// image::load_from_memory and then, in load_for_prompt_bytes, decodes it again into a
// DynamicImage and only then scales what exceeds MAX_DIMENSION (2048 px a side) down with a
// Triangle filter and re-encodes it. The bitmap costs width×height×(1 to 8) bytes: 4 for 8-bit
// RGBA, 3 for RGB, 8 for 16-bit RGBA PNG, plus the filter's float intermediate. Measured here: a
// 48 KB PNG declaring 20000×20000 took a child from 137 MB to 1,012 MB, one declaring
// 40000×40000 to 2.6 GB.
//
// 40 megapixels admits what chats carry: phone photos (12 MP; a 48 MP photo is over the 5 MiB
// byte cap anyway), 4K and 5K screenshots (8.3 and 14.7 MP), an 8K one (33 MP). Its bitmap is
// 160 MB as 8-bit RGBA and at most 320 MB, against a child's ~150 MB: a spike a host sized for
// a few children survives, where the bombs above take gigabytes.
const DefaultMaxPixels = 40_000_000

// Screen checks each image of a message before codex sees it. A data: URL image is kept
// when its header (read without decoding pixels, imagehdr) says it is a png, jpeg, gif or webp
// of at most maxPixels pixels; otherwise it is left out, and notices says why, one line each
// ("image 2 not shown: ..."), for the chat and for codex. Images by http(s) URL are kept: codex
// hands those to the model without decoding them.
func Screen(images []string, maxPixels int64) (kept, notices []string) {
	for i, url := range images {
		why := imageRefusal(url, maxPixels)
		if why == "" {
			kept = append(kept, url)
			continue
		}
		notices = append(notices, fmt.Sprintf("image %d not shown: %s", i+1, why))
	}
	return kept, notices
}

// imageRefusal says why url must not reach codex, or "" when it may.
func imageRefusal(url string, maxPixels int64) string {
	rest, ok := cutPrefixFold(url, "data:")
	if !ok {
		return ""
	}
	meta, payload, ok := strings.Cut(rest, ",")
	if !ok || !strings.Contains(strings.ToLower(meta), ";base64") {
		return "it is not a base64 data URL"
	}
	_, err := imagehdr.Check(base64.NewDecoder(base64.StdEncoding, strings.NewReader(payload)), maxPixels)
	var over *imagehdr.OverBudgetError
	switch {
	case errors.As(err, &over):
		return fmt.Sprintf("%d×%d pixels, over the %.0f-megapixel limit for images",
			over.Header.Width, over.Header.Height, float64(over.MaxPixels)/1e6)
	case err != nil:
		return "its size could not be read from it (not a whole png, jpeg, gif or webp image)"
	}
	return ""
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		return s[len(prefix):], true
	}
	return s, false
}
