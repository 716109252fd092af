package bench.peers;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.StandbyUpdateListener;
import org.apache.kafka.streams.processor.TaskId;

/**
 * The counting app of `python -m bench.failover`: a count per key in a RocksDB store with a changelog, each
 * output naming the worker that made it and when (seconds since the epoch), as bench.processors:StampedCount
 * does. It runs until killed.
 *
 * <p>Options: --group (the application id), --bootstrap, --state-dir, --input, --output, --worker,
 * --standbys (num.standby.replicas), --session-timeout-ms, --heartbeat-interval-ms. The input's values are
 * not read, so any encoding does.
 *
 * <p>Each standby's changelog position is kept in the file {@code <state-dir>/standby-positions/<partition>}
 * (the offset it will read next): the benchmark reads there when a standby has caught up, which Kafka
 * Streams tells only its listener.
 */
public final class FailoverPeer {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final Serde<String> STRINGS = Serdes.String();
    private static final Serde<ObjectNode> VALUES = Serdes.serdeFrom(
            (topic, value) -> KafkaStreamsPeer.encode(value), (topic, bytes) -> KafkaStreamsPeer.decode(bytes));

    private FailoverPeer() {}

    public static void main(String[] args) throws InterruptedException {
        Map<String, String> options = KafkaStreamsPeer.options(args);
        options.put("workload", "count");
        options.put("guarantee", "at_least_once");
        Properties settings = KafkaStreamsPeer.settings(options);
        settings.put(StreamsConfig.NUM_STANDBY_REPLICAS_CONFIG, Integer.parseInt(options.get("standbys")));
        settings.put(
                StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG),
                Integer.parseInt(options.get("session-timeout-ms")));
        settings.put(
                StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG),
                Integer.parseInt(options.get("heartbeat-interval-ms")));
        KafkaStreamsPeer.announce(settings);
        String worker = options.get("worker");

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(options.get("input"), Consumed.with(STRINGS, Serdes.ByteArray()))
                .groupByKey()
                .count(Materialized.as("counts"))
                .toStream()
                .mapValues((key, count) -> JSON.createObjectNode()
                        .put("key", key)
                        .put("count", count)
                        .put("worker", worker)
                        .put("at", System.currentTimeMillis() / 1000.0))
                .to(options.get("output"), Produced.with(STRINGS, VALUES));

        KafkaStreams streams = new KafkaStreams(builder.build(settings), settings);
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close();
            stopped.countDown();
        }));
        streams.setStandbyUpdateListener(new PositionFiles(Path.of(options.get("state-dir"), "standby-positions")));
        streams.setUncaughtExceptionHandler(error -> {
            error.printStackTrace();
            System.exit(1);
            return null;
        });
        streams.start();
        stopped.await();
    }

    /** Writes each standby's position, replacing the file whole so that a reader never sees half of it. */
    private static final class PositionFiles implements StandbyUpdateListener {
        private final Path directory;

        PositionFiles(Path directory) {
            this.directory = directory;
        }

        @Override
        public void onUpdateStart(TopicPartition partition, String storeName, long startingOffset) {
            write(partition, startingOffset);
        }

        @Override
        public void onBatchLoaded(
                TopicPartition partition,
                String storeName,
                TaskId taskId,
                long batchEndOffset,
                long batchSize,
                long currentEndOffset) {
            write(partition, batchEndOffset + 1);
        }

        @Override
        public void onUpdateSuspended(
                TopicPartition partition,
                String storeName,
                long storeOffset,
                long currentEndOffset,
                SuspendReason reason) {}

        private void write(TopicPartition partition, long position) {
            try {
                Files.createDirectories(directory);
                Path written = directory.resolve(partition.partition() + ".new");
                Files.writeString(written, Long.toString(position), StandardCharsets.US_ASCII);
                Files.move(
                        written,
                        directory.resolve(Integer.toString(partition.partition())),
                        StandardCopyOption.ATOMIC_MOVE);
            } catch (IOException error) {
                throw new UncheckedIOException(error);
            }
        }
    }
}
