// Errors a user can act on: every message says what was wrong, where, and what to do.
// InputError (bad config, data or arguments) maps to exit code 2; any other Error to exit code 1.
#pragma once

#include <stdexcept>
#include <string>

namespace ringtrain {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Bad input from the user: config, data files, command-line arguments.
class InputError : public Error {
public:
    explicit InputError(const std::string& message) : Error(message) {}
};

// Throws Error(message) when cond is false; for invariants that should hold whatever the input.
inline void check(bool cond, const std::string& message) {
    if (!cond) throw Error(message);
}

}  // namespace ringtrain

namespace ringtrain {

// An InputError that every rank raises together at the same point of a collective check (e.g. mismatched
// models), so the job can end cleanly with exit code 2 instead of being aborted.
class CollectiveInputError : public InputError {
public:
    explicit CollectiveInputError(const std::string& message) : InputError(message) {}
};

// An Error that every rank knows about at the same point (agreed through a collective: the other ranks raise
// PeerFailure there), so the job can end cleanly with exit code 1 instead of being aborted.
class CollectiveError : public Error {
public:
    explicit CollectiveError(const std::string& message) : Error(message) {}
};

// Raised on the ranks that did not fail when another rank failed during set-up; carries that rank's exit code.
class PeerFailure : public Error {
public:
    PeerFailure(const std::string& message, int exit_code) : Error(message), exit_code_(exit_code) {}
    int exit_code() const { return exit_code_; }

private:
    int exit_code_;
};

}  // namespace ringtrain
