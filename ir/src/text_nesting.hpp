#pragma once
// How deeply tape attributes (loop and checkpoint bodies inside bodies) may nest in the
// text form. Each nested body is printed and parsed recursively, so a cap keeps hostile
// text from exhausting the stack; to_string (printer.cpp) and parse_tape (parser.cpp)
// share it, so that whatever prints parses, and both refuse deeper tapes with a short
// reel::Error (docs/tape-format.md).
namespace reel {
inline constexpr int kMaxTextNesting = 256;
}  // namespace reel
