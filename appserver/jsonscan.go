package appserver

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// A warm turn's notifications are read twice per message by encoding/json before anyone looks
// at what they carry: once to take the envelope apart (plainNotification) and once to learn the
// thread and turn they belong to (routeOf). Both only need a few top-level members, so both walk
// the members of already validated JSON with the byte scanner below and take the value of the
// members they need, without decoding the rest into maps or structs. Anything the scanner does
// not read plainly (an escaped key or value, a key that differs from a wanted one only in case,
// a value of another type, a member given twice) goes to the encoding/json decode they used
// before, so both answer exactly as that decode on every input (FuzzFastScanMatchesDecode).

// eachMember calls fn with the key and the value of every top-level member of obj, in order,
// the key without quotes and the value without surrounding space. obj must be valid JSON
// (json.Valid); eachMember reports false when obj is not an object, when a key holds an escape
// (the caller then decodes obj in full), or when fn returns false.
func eachMember(obj []byte, fn func(key, value []byte) bool) bool {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return false
	}
	i = skipSpace(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return true
	}
	for i < len(obj) {
		if obj[i] != '"' {
			return false
		}
		end := stringEnd(obj, i)
		if end < 0 {
			return false
		}
		key := obj[i+1 : end-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			return false
		}
		i = skipSpace(obj, end)
		if i >= len(obj) || obj[i] != ':' {
			return false
		}
		start := skipSpace(obj, i+1)
		end = valueEnd(obj, start)
		if end < 0 || !fn(key, obj[start:end]) {
			return false
		}
		i = skipSpace(obj, end)
		if i >= len(obj) {
			return false
		}
		switch obj[i] {
		case ',':
			i = skipSpace(obj, i+1)
		case '}':
			return true
		default:
			return false
		}
	}
	return false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index just past the string that starts at b[i] (a quote), or -1.
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// valueEnd returns the index just past the value that starts at b[i], or -1. b is valid JSON,
// so a container ends where its brackets balance outside strings, and a literal or number at
// the first delimiter.
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end := stringEnd(b, j)
				if end < 0 {
					return -1
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	default:
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' &&
			b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
			j++
		}
		return j
	}
}

// plainString returns the text of a JSON string without escapes, or false for anything else.
func plainString(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' || bytes.IndexByte(v, '\\') >= 0 || !utf8.Valid(v) {
		return "", false
	}
	return string(v[1 : len(v)-1]), true
}

// foldsTo reports whether key is a case variant of name other than name itself: encoding/json
// would match such a key to name's field, the scanner leaves it to encoding/json.
func foldsTo(key []byte, name string) bool {
	return string(key) != name && strings.EqualFold(string(key), name)
}

// routeOfFast is routeOf for params whose routing members are plain: strings without escapes,
// "turn" an object whose "id" is one, each given once and in its exact case. It reports false
// for anything else.
func routeOfFast(params []byte) (threadID, turnID string, ok bool) {
	var turnStructID string
	var seenThread, seenTurnID, seenTurn bool
	ok = eachMember(params, func(key, value []byte) bool {
		var good bool
		switch string(key) {
		case "threadId":
			if seenThread {
				return false
			}
			seenThread = true
			threadID, good = plainString(value)
			return good
		case "turnId":
			if seenTurnID {
				return false
			}
			seenTurnID = true
			turnID, good = plainString(value)
			return good
		case "turn":
			if seenTurn || len(value) == 0 || value[0] != '{' {
				return false
			}
			seenTurn = true
			var seenID bool
			return eachMember(value, func(k, v []byte) bool {
				if string(k) == "id" {
					if seenID {
						return false
					}
					seenID = true
					turnStructID, good = plainString(v)
					return good
				}
				return !foldsTo(k, "id")
			})
		}
		return !foldsTo(key, "threadId") && !foldsTo(key, "turnId") && !foldsTo(key, "turn")
	})
	if !ok {
		return "", "", false
	}
	if turnID == "" {
		turnID = turnStructID
	}
	return threadID, turnID, true
}

// routeOf returns the thread and turn a notification's params name ("" when they name none or
// do not decode).
func routeOf(params json.RawMessage) (threadID, turnID string) {
	if len(params) == 0 || !json.Valid(params) {
		return "", ""
	}
	if threadID, turnID, ok := routeOfFast(params); ok {
		return threadID, turnID
	}
	return routeOfDecode(params)
}

// ItemType returns the type of the item an item/* notification's params carry, and whether the
// params decode as encoding/json would decode them into struct{ Item struct{ Type string } }:
// the same answer, read by a scan where the members are plain. The supervisor's watchdogs look
// at nothing else of most items.
func ItemType(params json.RawMessage) (typ string, ok bool) {
	if typ, ok, plain := itemTypeFast(params); plain {
		return typ, ok
	}
	var p struct {
		Item struct {
			Type string `json:"type"`
		} `json:"item"`
	}
	if json.Unmarshal(params, &p) != nil {
		return "", false
	}
	return p.Item.Type, true
}

// itemTypeFast is ItemType by a scan; plain is false when the scan cannot answer.
func itemTypeFast(params []byte) (typ string, ok, plain bool) {
	if len(params) == 0 || !json.Valid(params) {
		return "", false, true
	}
	var seenItem bool
	plain = eachMember(params, func(key, value []byte) bool {
		if string(key) != "item" {
			return !foldsTo(key, "item")
		}
		if seenItem || len(value) == 0 || value[0] != '{' {
			return false
		}
		seenItem = true
		var seenType bool
		return eachMember(value, func(k, v []byte) bool {
			if string(k) != "type" {
				return !foldsTo(k, "type")
			}
			if seenType {
				return false
			}
			seenType = true
			var good bool
			typ, good = plainString(v)
			return good
		})
	})
	if !plain {
		return "", false, false
	}
	return typ, true, true
}
