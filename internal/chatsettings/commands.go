package chatsettings

import (
	"slices"
	"strings"
)

// ModelChange is what SetModel did.
type ModelChange struct {
	Resolved
	// DroppedEffort is the chat's effort the new model does not support: the chat's choice of
	// effort was cleared, and the turns run with Resolved.Effort.
	DroppedEffort string
}

// SetModel makes name chatKey's model (Default: clear the chat's choice). A name that is not
// allowed is refused with a *NotAllowedError, and nothing changes. A chat's effort the new model
// does not support is dropped, and the change says so.
func (s *Store) SetModel(chatKey, name string) (ModelChange, error) {
	name = strings.TrimSpace(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.chats[chatKey]
	if strings.EqualFold(name, Default) {
		c.Model = ""
	} else {
		if allowed := s.AllowedModels(); !slices.Contains(allowed, name) {
			return ModelChange{}, &NotAllowedError{What: "model", Name: name, Allowed: allowed}
		}
		c.Model = name
		if def, _ := s.configuredModel(); def == name {
			c.Model = "" // the configured default is no choice: it follows the operator's
		}
	}
	var ch ModelChange
	if c.Effort != "" {
		model := c.Model
		if model == "" {
			model, _ = s.configuredModel()
		}
		if efforts, known := s.efforts(model); known && !slices.Contains(efforts, c.Effort) {
			ch.DroppedEffort, c.Effort = c.Effort, ""
		}
	}
	if err := s.setLocked(chatKey, c); err != nil {
		return ModelChange{}, err
	}
	ch.Resolved = s.resolve(c)
	return ch, nil
}

// SetEffort makes level chatKey's effort (Default: clear the chat's choice). A level the chat's
// model does not take is refused with a *NotAllowedError, and nothing changes.
func (s *Store) SetEffort(chatKey, level string) (Resolved, error) {
	level = strings.ToLower(strings.TrimSpace(level))
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.chats[chatKey]
	if level == Default {
		c.Effort = ""
	} else {
		model := s.resolve(c).Model
		if efforts, _ := s.efforts(model); !slices.Contains(efforts, level) {
			return Resolved{}, &NotAllowedError{What: "effort", Name: level, Model: model, Allowed: slices.Clone(efforts)}
		}
		c.Effort = level
	}
	if err := s.setLocked(chatKey, c); err != nil {
		return Resolved{}, err
	}
	return s.resolve(c), nil
}
