// Package chat is what both inboxes (inbox/molecule and inbox/local) share: the Answerer they
// hand messages to, the chat commands (/stop, /new, /status, /help, /approve, /deny) and the
// approval prompts, the texts that stand in for an answer when a turn could not give one, and
// text caps. It knows neither inbox: an inbox imports it, never the reverse.
package chat
