#include "shared/listing.h"

#include <iterator>

#include "shared/enum_names.h"

namespace quiver {

namespace {

constexpr const char* const kMethods[] = {"tools/list", "resources/list",
                                          "resources/templates/list", "prompts/list"};
constexpr const char* const kResultFields[] = {"tools", "resources", "resourceTemplates",
                                               "prompts"};
constexpr const char* const kKindNames[] = {"tools", "resources", "resource_templates", "prompts"};
constexpr const char* const kKeyFields[] = {"name", "uri", "uriTemplate", "name"};
static_assert(std::size(kMethods) == kListKindCount && std::size(kResultFields) == kListKindCount &&
              std::size(kKindNames) == kListKindCount && std::size(kKeyFields) == kListKindCount);

constexpr const char* const kStateNames[] = {"not_listed", "ok", "absent", "failed"};
static_assert(covers_enum(kStateNames, ListState::kFailed));

}  // namespace

const char* list_method(ListKind kind) { return name_of(kMethods, kind, ""); }

const char* list_result_field(ListKind kind) { return name_of(kResultFields, kind, ""); }

const char* list_kind_name(ListKind kind) { return name_of(kKindNames, kind, ""); }

const char* list_key_field(ListKind kind) { return name_of(kKeyFields, kind, "name"); }

const char* list_state_name(ListState state) { return name_of(kStateNames, state, "not_listed"); }

}  // namespace quiver
