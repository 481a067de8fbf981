// Identity, kept as an umbrella so that existing includes keep working: each concept has its own
// header now. Include the one you need in new code.
//   shared/principal.h    identifiers (connection, member, namespace) and principals
//   shared/config_hash.h  the connection's non-secret identity and its digest
//   shared/redis_keys.h   every Redis key of the layout, built and parsed back
#pragma once

#include "shared/config_hash.h"
#include "shared/principal.h"
#include "shared/redis_keys.h"
