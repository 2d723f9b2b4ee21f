// The attention oracle instantiated for quad (one file per type, so the types compile in parallel).
#include "oracle/attention_impl.hpp"

namespace fc::oracle {

template AttentionForward<quad> attention_forward<quad>(const AttentionProblem&, AttentionInputs<quad>);
template AttentionBackward<quad> attention_backward<quad>(const AttentionProblem&, AttentionInputs<quad>, std::span<const quad>);
template AttentionDoubleBackward<quad> attention_double_backward<quad>(const AttentionProblem&, AttentionInputs<quad>,
                                                                   std::span<const quad>, AttentionInputs<quad>);

}  // namespace fc::oracle
