// AttentionGemms (see header).
#include "nn/attention_gemms.hpp"

#include <cmath>

#include "ringtrain/core/error.hpp"

namespace ringtrain {

AttentionGemms::AttentionGemms(std::int64_t samples, std::int64_t t, std::int64_t heads, std::int64_t head_size)
    : n_(samples), t_(t), heads_(heads), hs_(head_size) {
  RT_REQUIRE(n_ > 0 && t_ > 0 && heads_ > 0 && hs_ > 0, Error,
             "attention: {} samples of {} positions, {} heads of {}: all must be positive", n_, t_, heads_, hs_);
}

AttentionGemms::Operand AttentionGemms::fused(Buffer buffer, int part) const {
  const std::int64_t c = heads_ * hs_;
  return Operand{buffer, part * c, t_ * 3 * c, hs_};
}

AttentionGemms::Operand AttentionGemms::heads(Buffer buffer) const {
  return Operand{buffer, 0, t_ * heads_ * hs_, hs_};
}

AttentionGemms::Operand AttentionGemms::square(Buffer buffer) const {
  return Operand{buffer, 0, heads_ * t_ * t_, t_ * t_};
}

AttentionGemms::Product AttentionGemms::product(GemmShape shape, float alpha, const Operand& a, const Operand& b,
                                                const Operand& c) const {
  const bool per_sample = n_ <= heads_;
  const std::int64_t launches = per_sample ? n_ : heads_;
  shape.batch = per_sample ? heads_ : n_;
  shape.stride_a = per_sample ? a.per_head : a.per_sample;
  shape.stride_b = per_sample ? b.per_head : b.per_sample;
  shape.stride_c = per_sample ? c.per_head : c.per_sample;
  auto start = [&](const Operand& o, std::int64_t i) {
    return o.offset + i * (per_sample ? o.per_sample : o.per_head);
  };
  Product p{alpha, a.buffer, b.buffer, c.buffer, {}};
  for (std::int64_t i = 0; i < launches; ++i)
    p.launches.push_back(Launch{shape, start(a, i), start(b, i), start(c, i)});
  return p;
}

AttentionGemms::Product AttentionGemms::scores() const {
  const std::int64_t c3 = 3 * heads_ * hs_;
  return product(GemmShape{false, true, t_, t_, hs_, c3, c3, t_}, 1.0f / std::sqrt(static_cast<float>(hs_)),
                 fused(Buffer::x, 0), fused(Buffer::x, 1), square(Buffer::scores));
}

AttentionGemms::Product AttentionGemms::output() const {
  const std::int64_t c = heads_ * hs_;
  return product(GemmShape{false, false, t_, hs_, t_, t_, 3 * c, c}, 1.0f, square(Buffer::probs), fused(Buffer::x, 2),
                 heads(Buffer::y));
}

AttentionGemms::Product AttentionGemms::value_grad() const {
  const std::int64_t c = heads_ * hs_;
  return product(GemmShape{true, false, t_, hs_, t_, t_, c, 3 * c}, 1.0f, square(Buffer::probs), heads(Buffer::dy),
                 fused(Buffer::dx, 2));
}

AttentionGemms::Product AttentionGemms::prob_grad() const {
  const std::int64_t c = heads_ * hs_;
  return product(GemmShape{false, true, t_, t_, hs_, c, 3 * c, t_}, 1.0f, heads(Buffer::dy), fused(Buffer::x, 2),
                 square(Buffer::scores));
}

AttentionGemms::Product AttentionGemms::query_grad() const {
  const std::int64_t c3 = 3 * heads_ * hs_;
  return product(GemmShape{false, false, t_, hs_, t_, t_, c3, c3}, 1.0f / std::sqrt(static_cast<float>(hs_)),
                 square(Buffer::probs), fused(Buffer::x, 1), fused(Buffer::dx, 0));
}

AttentionGemms::Product AttentionGemms::key_grad() const {
  const std::int64_t c3 = 3 * heads_ * hs_;
  return product(GemmShape{true, false, t_, hs_, t_, t_, c3, c3}, 1.0f / std::sqrt(static_cast<float>(hs_)),
                 square(Buffer::probs), fused(Buffer::x, 0), fused(Buffer::dx, 1));
}

}  // namespace ringtrain
