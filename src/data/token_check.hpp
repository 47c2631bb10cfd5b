// Private: the loops over token arrays of any token type (uint8/16/32, native order) that the
// token dataset, its reader and the converters share: finding the first token outside the
// vocabulary, and widening tokens to the int32 the batches hold.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "ringtrain/core/error.hpp"
#include "ringtrain/data/dataset.hpp"

namespace ringtrain::data {

template <typename F>
decltype(auto) with_token_type(SampleType type, F&& f) {
  switch (type) {
    case SampleType::u8: return f(std::uint8_t{});
    case SampleType::u16: return f(std::uint16_t{});
    case SampleType::u32: return f(std::uint32_t{});
    default: throw DataError(fmt::format("tokens of type {} are not supported", sample_type_name(type)));
  }
}

// Token i of n stored at `tokens`.
inline std::uint32_t token_at(SampleType type, const std::byte* tokens, std::int64_t i) {
  return with_token_type(type, [&](auto zero) -> std::uint32_t {
    decltype(zero) v{};
    std::memcpy(&v, tokens + i * static_cast<std::int64_t>(sizeof v), sizeof v);
    return v;
  });
}

// Index of the first of n tokens that is >= vocab_size, or -1 when all are below it.
inline std::int64_t first_outside_vocab(SampleType type, const std::byte* tokens, std::int64_t n,
                                        std::int64_t vocab_size) {
  return with_token_type(type, [&](auto zero) -> std::int64_t {
    using T = decltype(zero);
    const auto* t = reinterpret_cast<const T*>(tokens);
    for (std::int64_t i = 0; i < n; ++i)
      if (static_cast<std::int64_t>(t[i]) >= vocab_size) return i;
    return -1;
  });
}

// DataError "PATH: dataset 'KEY': token V at index I is >= vocab_size N" for the first token of
// the n at `tokens` (index `first` of the file's dataset) outside the vocabulary.
inline void check_tokens(SampleType type, const std::byte* tokens, std::int64_t n, std::int64_t vocab_size,
                         const std::string& path, const std::string& key, std::int64_t first) {
  const std::int64_t bad = first_outside_vocab(type, tokens, n, vocab_size);
  RT_REQUIRE(bad < 0, DataError, "{}: dataset '{}': token {} at index {} is >= vocab_size {}", path, key,
             token_at(type, tokens, bad), first + bad, vocab_size);
}

// n tokens to int32 (callers have checked them against a vocabulary of at most 2^31).
inline void widen_tokens(SampleType type, const std::byte* tokens, std::int64_t n, std::int32_t* out) {
  with_token_type(type, [&](auto zero) {
    using T = decltype(zero);
    const auto* t = reinterpret_cast<const T*>(tokens);
    for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<std::int32_t>(t[i]);
  });
}

}  // namespace ringtrain::data
