package supervisor

import "github.com/molecule-ai/codex-warm/supervisor/images"

// DefaultMaxImagePixels is the largest image, in pixels, codex is given (Config.MaxImagePixels;
// package images checks each image).
const DefaultMaxImagePixels = images.DefaultMaxPixels

// WithNotices appends the reply's notices (Reply.Notices) to text, one bracketed line each, so
// the chat learns what of its message codex did not see.
func (r Reply) WithNotices(text string) string {
	for _, n := range r.Notices {
		if text != "" {
			text += "\n\n"
		}
		text += "[" + n + "]"
	}
	return text
}
