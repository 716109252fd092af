package bench.peers;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindows;

/**
 * One workload of `python -m bench.peers` as a Kafka Streams DSL topology, one stream thread.
 *
 * <p>It takes the command line of bench/peers/peer_args.py (--group is the application id; --partitions
 * and --records are not needed here) and prints its settings as that module's `announce` does. It stops,
 * with KafkaStreams.close() (which commits and flushes), once --outputs output records have been handed
 * to its producer: the benchmark knows how many the input makes.
 */
public final class KafkaStreamsPeer {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final Serde<String> STRINGS = Serdes.String();
    private static final Serde<ObjectNode> VALUES = Serdes.serdeFrom(
            (topic, value) -> encode(value), (topic, bytes) -> decode(bytes));

    private KafkaStreamsPeer() {}

    public static void main(String[] args) throws InterruptedException {
        Map<String, String> options = options(args);
        String workload = options.get("workload");
        Properties settings = settings(options);
        announce(settings);
        long outputs = Long.parseLong(options.get("outputs"));
        CountDownLatch done = new CountDownLatch(1);
        AtomicLong sent = new AtomicLong();

        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, ObjectNode> input = builder.stream(options.get("input"), Consumed.with(STRINGS, VALUES));
        topology(workload, input)
                .peek((key, value) -> {
                    if (sent.incrementAndGet() == outputs) {
                        done.countDown();
                    }
                })
                .to(options.get("output"), Produced.with(STRINGS, VALUES));

        try (KafkaStreams streams = new KafkaStreams(builder.build(settings), settings)) {
            streams.setUncaughtExceptionHandler(error -> {
                error.printStackTrace();
                System.exit(1);
                return null;
            });
            streams.start();
            done.await();
        }
    }

    /** As peer_args.announce: the settings but the run's own application id, broker and state directory. */
    static void announce(Properties settings) {
        Properties shown = new Properties();
        shown.putAll(settings);
        shown.remove(StreamsConfig.APPLICATION_ID_CONFIG);
        shown.remove(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG);
        shown.remove(StreamsConfig.STATE_DIR_CONFIG);
        System.out.println("peer settings: " + new String(encode(JSON.valueToTree(shown)), StandardCharsets.UTF_8));
        System.out.flush();
    }

    /** Kafka Streams' defaults but these. */
    static Properties settings(Map<String, String> options) {
        Properties settings = new Properties();
        settings.put(StreamsConfig.APPLICATION_ID_CONFIG, options.get("group"));
        settings.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, options.get("bootstrap"));
        settings.put(StreamsConfig.STATE_DIR_CONFIG, options.get("state-dir"));
        settings.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        settings.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        boolean exactlyOnce = options.get("guarantee").equals("exactly_once");
        settings.put(
                StreamsConfig.PROCESSING_GUARANTEE_CONFIG,
                exactlyOnce ? StreamsConfig.EXACTLY_ONCE_V2 : StreamsConfig.AT_LEAST_ONCE);
        if (!options.get("workload").equals("transform")) {
            // The record cache holds a store's updates until the next commit (every 30 s at-least-once) and
            // folds several updates of a key into one: the count workload emits every update, and the window
            // workload's results would wait for that commit to reach suppress. Its output is the same either way.
            settings.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        }
        return settings;
    }

    static KStream<String, ObjectNode> topology(String workload, KStream<String, ObjectNode> input) {
        switch (workload) {
            case "transform":
                return input.mapValues(value -> value.put("seen", true));
            case "count":
                return input.groupByKey()
                        .count(Materialized.as("counts"))
                        .toStream()
                        .mapValues((key, count) -> JSON.createObjectNode().put("key", key).put("count", count));
            case "window":
                return input.groupByKey()
                        .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMinutes(1), Duration.ZERO))
                        .count(Materialized.as("window-counts"))
                        .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
                        .toStream()
                        .map((window, count) -> KeyValue.pair(window.key(), JSON.createObjectNode()
                                .put("start", window.window().start())
                                .put("end", window.window().end())
                                .put("count", count)));
            default:
                throw new IllegalArgumentException("unknown workload " + workload);
        }
    }

    static Map<String, String> options(String[] args) {
        Map<String, String> options = new HashMap<>();
        for (int i = 0; i + 1 < args.length; i += 2) {
            options.put(args[i].replaceFirst("^--", ""), args[i + 1]);
        }
        return options;
    }

    static byte[] encode(JsonNode value) {
        try {
            return JSON.writeValueAsBytes(value);
        } catch (IOException error) {
            throw new UncheckedIOException(error);
        }
    }

    static ObjectNode decode(byte[] bytes) {
        try {
            return (ObjectNode) JSON.readTree(bytes);
        } catch (IOException error) {
            throw new UncheckedIOException(error);
        }
    }
}
