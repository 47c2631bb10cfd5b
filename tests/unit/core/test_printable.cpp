// printable: text from files quoted on one line, bytes outside printable ASCII escaped, at most
// 200 bytes of it.
#include <gtest/gtest.h>

#include <string>

#include "ringtrain/core/printable.hpp"

namespace ringtrain {
namespace {

TEST(Printable, KeepsPrintableAsciiAndEscapesEveryOtherByte) {
  EXPECT_EQ(printable("transformer.h.0.attn.c_attn.weight"), "transformer.h.0.attn.c_attn.weight");
  EXPECT_EQ(printable("a\nb\x1b[2J\x7f\xc3\xa9"), "a\\x0ab\\x1b[2J\\x7f\\xc3\\xa9");
  EXPECT_EQ(printable(std::string("n\0l", 3)), "n\\x00l");
  EXPECT_EQ(printable(""), "");
}

TEST(Printable, CutsAfterTwoHundredBytes) {
  EXPECT_EQ(printable(std::string(200, 'a')), std::string(200, 'a'));
  EXPECT_EQ(printable(std::string(250, 'a')), std::string(200, 'a') + "...");
}

}  // namespace
}  // namespace ringtrain
