#include "trainscope/core/base/status.h"

namespace trainscope::core {

const char* errorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::Ok: return "ok";
    case ErrorCode::InvalidArgument: return "invalid-argument";
    case ErrorCode::NotFound: return "not-found";
    case ErrorCode::Io: return "io";
    case ErrorCode::NotSqlite: return "not-sqlite";
    case ErrorCode::WrongMagic: return "wrong-magic";
    case ErrorCode::NewerSchema: return "newer-schema";
    case ErrorCode::Truncated: return "truncated";
    case ErrorCode::Corrupt: return "corrupt";
    case ErrorCode::MalformedJson: return "malformed-json";
    case ErrorCode::BadTrace: return "bad-trace";
    case ErrorCode::Sqlite: return "sqlite";
  }
  return "unknown";
}

std::string Status::toString() const {
  if (isOk()) return "ok";
  return std::string(errorCodeName(code_)) + ": " + message_;
}

}  // namespace trainscope::core
