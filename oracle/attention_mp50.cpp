// The attention oracle instantiated for mp50 (one file per type, so the types compile in parallel).
#include "oracle/attention_impl.hpp"

namespace fc::oracle {

template AttentionForward<mp50> attention_forward<mp50>(const AttentionProblem&, AttentionInputs<mp50>);
template AttentionBackward<mp50> attention_backward<mp50>(const AttentionProblem&, AttentionInputs<mp50>, std::span<const mp50>);
template AttentionDoubleBackward<mp50> attention_double_backward<mp50>(const AttentionProblem&, AttentionInputs<mp50>,
                                                                   std::span<const mp50>, AttentionInputs<mp50>);

}  // namespace fc::oracle
