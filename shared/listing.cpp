#include "shared/listing.h"

namespace quiver {

const char* list_method(ListKind kind) {
  switch (kind) {
    case ListKind::kTools:
      return "tools/list";
    case ListKind::kResources:
      return "resources/list";
    case ListKind::kResourceTemplates:
      return "resources/templates/list";
    case ListKind::kPrompts:
      return "prompts/list";
  }
  return "";
}

const char* list_result_field(ListKind kind) {
  switch (kind) {
    case ListKind::kTools:
      return "tools";
    case ListKind::kResources:
      return "resources";
    case ListKind::kResourceTemplates:
      return "resourceTemplates";
    case ListKind::kPrompts:
      return "prompts";
  }
  return "";
}

const char* list_kind_name(ListKind kind) {
  switch (kind) {
    case ListKind::kTools:
      return "tools";
    case ListKind::kResources:
      return "resources";
    case ListKind::kResourceTemplates:
      return "resource_templates";
    case ListKind::kPrompts:
      return "prompts";
  }
  return "";
}

const char* list_state_name(ListState state) {
  switch (state) {
    case ListState::kNotListed:
      return "not_listed";
    case ListState::kOk:
      return "ok";
    case ListState::kAbsent:
      return "absent";
    case ListState::kFailed:
      return "failed";
  }
  return "not_listed";
}

}  // namespace quiver
