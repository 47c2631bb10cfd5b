// make_run_comms and step_options (see header).
#include "ringtrain/train/run_comms.hpp"

#include "ringtrain/core/log.hpp"
#include "ringtrain/runtime/context.hpp"

namespace ringtrain {

RunComms make_run_comms(const Context& ctx, const TrainConfig& tc) {
  RunComms c;
  c.watchdog = std::make_unique<Watchdog>(tc.timeout_s, [&ctx](const std::string& message) {
    log::write_line(stderr, fmt::format("ringtrain: error: [rank {}] {}", ctx.world_rank(), message));
    ctx.abort(1);
  });
  CommOptions options;
  options.algo = parse_allreduce_algo(tc.allreduce);
  c.main = watch_collectives(make_mpi_communicator(ctx, options), *c.watchdog, "main");
  options.wire_dtype = parse_wire_dtype(tc.wire_dtype);
  c.gradient = watch_collectives(make_mpi_communicator(ctx, options), *c.watchdog, "gradient");
  return c;
}

StepOptions step_options(const TrainConfig& tc, const Context& ctx) {
  StepOptions o;
  o.overlap = tc.overlap && ctx.thread_multiple();
  o.bucket_mb = tc.bucket_mb;
  o.first_bucket_mb = tc.first_bucket_mb;
  o.accumulation_steps = tc.accumulation_steps;
  return o;
}

}  // namespace ringtrain
