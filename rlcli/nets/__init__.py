"""Networks: trunks, heads and the policy modules that evaluation, play and export run (``models``), the
recurrent memory (``recurrent``, ``rnn``), one policy per agent group (``grouped``), and observation and
reward normalisation (``normalization``)."""
