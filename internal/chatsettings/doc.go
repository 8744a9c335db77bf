// Package chatsettings owns each chat's choice of model and reasoning effort (the chat
// commands /model and /effort): what a chat may choose, checked against codex's model catalog
// (model/list) and the operator's lists, what a turn of the chat runs with, and the file in the
// state directory that keeps the choices across restarts and reloads.
//
// A turn's model comes from the first of: the chat's choice, the operator's --model, the
// Molecule workspace's model (Workspace), codex's own config. Its effort comes from the chat's
// choice, --effort, codex's config (model_reasoning_effort), then the model's default effort in
// the catalog; an effort the model does not support is passed over. codex keeps a turn's model
// and effort for the thread's later turns and writes them into its rollout, so the daemon sends
// the resolved ones on every turn (Store.Turn), and "default" really goes back.
//
// The file (FileName, mode 0600, written whole with package atomicfile) is
// {"version": 1, "chats": {chat key: {"model": …, "effort": …}}}; a chat without a choice has no
// entry. A missing file is a state directory written before the file existed: no chat has
// chosen anything.
package chatsettings
