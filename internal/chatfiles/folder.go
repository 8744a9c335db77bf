package chatfiles

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"regexp"
	"strings"
)

// ChatsDirName is the folder of the working directory that holds one folder per chat.
const ChatsDirName = ".chats"

var unsafeNameChars = regexp.MustCompile(`[^a-zA-Z0-9._\-]`)

// DirName is a chat key as a folder name: readable, made of safe characters, and made unique by
// a hash of the key (canvas:a and canvas_a stay apart).
func DirName(chatKey string) string {
	sum := sha256.Sum256([]byte(chatKey))
	s := unsafeNameChars.ReplaceAllString(chatKey, "_")
	if len(s) > 64 {
		s = s[:64]
	}
	return s + "-" + hex.EncodeToString(sum[:6])
}

// Folder is the chat's own folder under the working directory, <workDir>/.chats/<DirName>: where
// its uploads are saved and the only place files are sent from.
func Folder(workDir, chatKey string) string {
	return filepath.Join(workDir, ChatsDirName, DirName(chatKey))
}

// FromWorkDir is path as Copy takes it: a path the agent wrote starting with .chats/ or
// ./.chats/ is named from the working directory (where codex works), so it becomes absolute; any
// other path is left as it is (relative: from the chat's folder). The prefix is read as written,
// not after cleaning: .chats/<chat>/../../x cleans to ../x, which is still named from the working
// directory, so Copy sees where it leads and refuses it as outside.
func FromWorkDir(workDir, path string) string {
	if strings.HasPrefix(path, ChatsDirName+"/") || strings.HasPrefix(path, "./"+ChatsDirName+"/") {
		return filepath.Join(workDir, path)
	}
	return path
}
